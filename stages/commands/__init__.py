"""The commands on top of the stages: ``cli`` (``r1 …``, ``make …``), ``eval_command`` (``r1 eval``),
``report``, ``findings`` (``make findings``: the experiments behind the report's verdicts), ``passk``.
"""
