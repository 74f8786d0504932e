# The GPU ground's device scripts (python -m tests.gpu.loop|probe|repeat|make_model|compare_estimate,
# bash tests/gpu/device.sh), their recorded results (results/) and the tests of both.
