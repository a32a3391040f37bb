"""Helpers under everything: input checks (validate), conversions (convert), the device choice (device), where a
command may write (destinations) and the course's figure style (plotting).

Any module of the package may import these; they import nothing from the rest of ``attn``.
"""
