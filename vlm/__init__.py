"""The model and its inputs, shared by train and evaluate: video/image reading, sampling, messages, loading."""
