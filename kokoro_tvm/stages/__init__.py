"""The pipeline stages as functions: files in, files out, written atomically.

One module per stage, each a workflow script's whole logic (the script is its command line), so
that a rule depends on the code of its own stage only: editing validation does not re-export.
``common`` holds what several stages share. A stage function's docstring is the stage's one
description: its rule's header points to it, its script's --help shows it
(script_args.stage_parser).
"""
