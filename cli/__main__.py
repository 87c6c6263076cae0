"""``python -m pgqueue.cli``: the same as the ``pgq`` console script.

``pgq worker --processes N`` starts its children this way, with the interpreter that runs
the supervisor (``sys.executable``), so a child never depends on which ``pgq`` is first
on ``PATH``.
"""

from .app import main

main()
