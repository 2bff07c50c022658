"""pytest11 entry point of privgate; hooks are added by the pipeline issue."""
