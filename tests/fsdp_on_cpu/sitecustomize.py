"""Test harness only (tests/test_distributed.py puts this folder on PYTHONPATH): accelerate enables FSDP
only on accelerators, so on a CPU launch (gloo) it would run plain DDP. With ``R1_TEST_FSDP_ON_CPU=1``
this makes accelerate's state FSDP (version 2, configured from the ``FSDP_*`` environment as
``accelerate launch --config_file recipes/accelerate/fsdp.yaml`` would set it), so that the project's own
code runs sharded, unchanged, on CPU processes."""

import os

if os.environ.get("R1_TEST_FSDP_ON_CPU") == "1":
    import accelerate.state as _state
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    _init = _state.AcceleratorState.__init__

    def _fsdp_on_cpu(self, *args, **kwargs):
        _init(self, *args, **kwargs)
        if self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            if getattr(self, "fsdp_plugin", None) is None:
                self.fsdp_plugin = FullyShardedDataParallelPlugin()  # from FSDP_* in the environment

    _state.AcceleratorState.__init__ = _fsdp_on_cpu
