"""Sampling and text: the sampler and span verification (`sampling`), the logits
processors (`processors`), and the text layer of one generation (`text`)."""
