"""Developer tools that are not part of the flowsim package (``make mutation``)."""
