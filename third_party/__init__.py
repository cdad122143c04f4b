"""Code copied from other projects, unmodified below each file's header, with each project's license beside it."""
