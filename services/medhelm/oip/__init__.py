"""Generated stubs of protocols medhelm speaks as a client (``scripts/gen_protos.sh``)."""
