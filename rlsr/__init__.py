"""rlsr: train language models for selective prediction (RLSR) and evaluate them."""

__version__ = "0.1.0"
