"""Figures measured on a GPU, recorded for the learners who have none.

A notebook cell whose measurement needs CUDA prints the record where there is no GPU, and prints it beside
its own measurement where there is one. Each record says what was measured, on which machine, with which
torch and Triton, on which day, and where the run is described. Nothing here is computed: a record holds only
figures a run printed, and says which of them were kept.
"""

# Notebook 09, section 4.5: the cell that launches row_max_kernel on a table of 4096 rows of 16,384 float32
# values once per block size (256 to 16,384) and reads each compiled binary's registers per thread
# (`binary.n_regs`) and how many programs the SM's registers hold at once. Run once on an H200 during the
# GPU session of 2026-11-28 (README, "On a GPU again (2026-11-28)"); the figures are those the session
# wrote into 09's prose (commit e0cf259, issue 31). Only the smallest and the largest block size's registers
# and programs per SM, and the largest ratio between two block sizes' median times, were kept.
ROW_MAX_BLOCK_SIZES = {
    "what": "row_max_kernel on 4096 rows of 16,384 float32 values, one launch per block size",
    "machine": "one NVIDIA H200",
    "torch": "2.11.0+cu130",
    "triton": "3.6.0",
    "date": "2026-11-28",
    "source": "the GPU session described in the README (\"On a GPU again (2026-11-28)\"), commit e0cf259",
    "blocks": {
        256: {"registers per thread": 27, "programs per SM": 16},
        16384: {"registers per thread": 166, "programs per SM": 3},
    },
    # the slowest block size's median time over the fastest's, across every block size from 256 to 16,384
    "slowest over fastest, at most": 1.3,
    "not kept": "the block sizes between 256 and 16,384, the times themselves, the spills",
}
