# The patched torch as an image, from the wheel `make wheel` builds:
#   make wheel && docker build -t torch-fusion-overlay .
# test/test_wheel.py checks this file against the built wheel (name, Python
# version) and runs its Python checks in a venv with that wheel installed.
FROM python:3.11-slim
# torch.compile on CPU compiles C++ at run time
RUN apt-get update && apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*
# any release the series supports: "+cpu.fusion." or, from a CUDA wheel, "+fusion."
COPY build/wheel/torch-*fusion.*.whl /tmp/
RUN pip install --no-cache-dir /tmp/torch-*.whl && rm /tmp/torch-*.whl
RUN python -c "import torch; assert '.fusion.' in torch.__version__, torch.__version__"
RUN python -c "from torch._inductor import config; assert config.cpp.outer_loop_fusion_retile"
