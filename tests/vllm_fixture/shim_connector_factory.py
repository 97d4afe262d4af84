"""Stand-in for `vllm.distributed.{kv,ec}_transfer.*_connector.factory` (the
real factories import the connectors, torch and the distributed runtime).

The real KV/EC connector metrics modules import the factory but call it only
when a connector is configured; here none is (kv_transfer_config and
ec_transfer_config are None), so any use is an error.
"""


class _NoConnectorFactory:
    @staticmethod
    def get_connector_class(*args, **kwargs):
        raise RuntimeError("vllm-fixture: no KV/EC connector is configured")


KVConnectorFactory = _NoConnectorFactory
ECConnectorFactory = _NoConnectorFactory
