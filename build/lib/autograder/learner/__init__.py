"""What a learner's kernel runs: device choice, seeded inputs, memory measurement, plots,
drawings, quizzes, review and progress. Imports nothing else of `autograder`."""
