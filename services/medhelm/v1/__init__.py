"""Generated gRPC stubs for the MedHELM services (``scripts/gen_protos.sh``; do not edit the *_pb2* files)."""
