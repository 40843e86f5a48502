"""Running a sweep: the spec, the runner, its records, shards and their merge, grading, prompts, presets."""
