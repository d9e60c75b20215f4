"""Serve's side of the toy task: a backend that answers /v1/classify for it (serve keeps its
backends by task name; a task from outside registers its own)."""
from scratchformer.serve.backends import ClassifierBackend


class ToyBackend(ClassifierBackend):
    task, page = "toy", False
