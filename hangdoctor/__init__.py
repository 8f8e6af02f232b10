"""hangdoctor: is the inference server hung, and why?

Layer: foundation; may import: the standard library only.
"""

__version__ = "0.1.0"
