"""nbgrader configuration for the course: run nbgrader commands from the repository root."""
c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "backprop-course"
# solutions/ is the instructor source (solutions + hidden tests); `make release` turns it into notebooks/.
c.CourseDirectory.source_directory = "solutions"
# Only notebooks are released: a stray helper file beside a source notebook never reaches students.
c.CourseDirectory.include = ["*.ipynb"]

# A cell of ours runs in seconds on a laptop CPU; a minute means a student's loop never ends.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True

# nbgrader scores a test cell that writes to stderr as 0; library warnings must not cost points.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(UserWarning|FutureWarning|DeprecationWarning|RuntimeWarning)"
