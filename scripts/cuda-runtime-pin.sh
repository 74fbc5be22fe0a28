# The one pin of NVIDIA's nvidia-cuda-runtime wheel (sourced): its cuda.h is the header the
# driver catalogue is held to (scripts/census.sh), and the real-client tests install it
# (scripts/real-clients-env.sh).
CUDA_RUNTIME_VERSION=13.5.37
