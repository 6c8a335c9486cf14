"""The middle layer: judging and measuring model outputs.

The answer policy and its grader (``answers``, ``verify``, ``verify_pool``), the code sandbox
(``sandbox``), language consistency (``language``), checks in a chain of thought (``recheck``), rule
judges of general answers (``judges``), sampling (``decode``, ``generate``, ``budget``), the evaluation
protocol and its metrics (``runner``, ``metrics``), the data filters that need a grader (``cold_start``,
``rejection``), and the statistics, findings and figures of reports (``stats``, ``verdicts``,
``plots``). Imports ``data``, never ``stages``.
"""
