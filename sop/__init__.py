"""The SOP files, shipped inside the package as ``rlexp.sopdata`` (see pyproject.toml).

This folder holds data, not code; this file only makes it a regular package, so that
``importlib.resources`` finds the files in a wheel install and in an editable one alike.
"""
