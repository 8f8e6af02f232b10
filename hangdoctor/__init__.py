"""hangdoctor: is the inference server hung, and why?"""

__version__ = "0.1.0"
