# syntax=docker/dockerfile:1
# One image for host workers and board agents, for linux/amd64 and linux/arm64:
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t nnsweep .                    # host image
#   docker buildx build --platform linux/arm64 --build-arg EXTRAS=agent -t nnsweep-agent .  # board image
#
# The install step is the README's (`make install`); EXTRAS picks what it installs:
# host = conversion, sweeps, tracking (the default); agent = the runtimes only.
FROM python:3.11-slim-bookworm

ARG EXTRAS=host
# Arm NN (the armnn runtime) comes from Debian and runs in Debian's python3; on arm64 its
# CpuAcc (Neon) backend joins the CpuRef reference backend.
RUN apt-get update \
 && apt-get install -y --no-install-recommends make=4.3-4.1 \
      python3-pyarmnn=20.08-12 libarmnn-cpuref-backend22=20.08-12 libarmnntfliteparser22=20.08-12 \
 && if [ "$(dpkg --print-architecture)" = arm64 ]; then \
      apt-get install -y --no-install-recommends libarmnn-cpuacc-backend22=20.08-12; fi \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --create-home nnsweep

WORKDIR /opt/nnsweep
COPY pyproject.toml README.md Makefile ./
COPY nnsweep ./nnsweep
COPY dashboards ./dashboards
COPY sweeps ./sweeps
COPY device_agents ./device_agents
RUN make install EXTRAS="${EXTRAS}" PYTHON=python3.11 \
 && chown -R nnsweep /opt/nnsweep

USER 1000
ENV PATH=/opt/nnsweep/.venv/bin:$PATH
# A board: docker run --network host -v ~/.ray:/home/nnsweep/.ray:ro nnsweep-agent \
#            agent join --address HEAD:6379 --device rpi5 --block
ENTRYPOINT ["nnsweep"]
CMD ["--help"]
