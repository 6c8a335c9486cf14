"""The machinery every stage stands on; it imports no trainer and no stage.

``recipe`` (the schema) and ``trl_policy`` (what the project sets in TRL's configs), ``manifest`` (what a stage
read and wrote), ``runner`` (the stage table, resume, logging), ``threads`` (the fixed parallel layout),
``plan`` (batches and memory before a launch), ``common`` (models, devices, processes), ``cards`` (model cards).
"""
