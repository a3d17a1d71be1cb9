"""A custom gymnasium env package as a user would write one, for the tests that ship it with
the functions (``--env stellaris_testenvs.line:StellarisLine-v0``)."""
