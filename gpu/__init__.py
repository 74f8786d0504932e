"""The real GPU ground (issue 7): transformers serve on an H200, driven by the loop."""
