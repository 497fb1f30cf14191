"""One module per CLI verb. Module level: stdlib + typer only; heavy imports inside functions.

The package module itself imports nothing, so that the console script can run ``rlexp plan``'s output
(:mod:`rlexp.commands.plan_view`) without typer; the bounds several verbs share are in
:mod:`rlexp.commands.options`.
"""
