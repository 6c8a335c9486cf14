"""The bottom layer: data and its I/O.

Atomic JSONL and file writes with their fault points (``jsonl``, ``faults``), the prompt templates and
the reading of a completion's parts (``templates``), the synthetic task world, its pretraining corpus
and tokenizer (``taskworld``, ``corpus``, ``tokenizer``), the general tasks of stage 4 (``general``),
and the loaders of every dataset a recipe names (``datasets``, ``benchmarks``). Imports nothing from
``eval`` or ``stages`` (``make lint`` checks it).
"""
