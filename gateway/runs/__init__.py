"""A request's run while it is served: the stages of what the pipeline decided about it
(`stages`), and the run in flight that owns them, every chunk sent, and its one close (`run`)."""
