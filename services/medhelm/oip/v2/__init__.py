"""Generated gRPC stubs of the Open Inference Protocol v2 (KServe's ``inference.GRPCInferenceService``) from
protos/medhelm/oip/v2/grpc_predict_v2.proto (``scripts/gen_protos.sh``; do not edit the *_pb2* files)."""
