# nnsweep for host workers: the same steps as the README's set-up.
# (Multi-arch agent images for boards come with the devices work.)
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/nnsweep
COPY pyproject.toml README.md Makefile ./
COPY nnsweep ./nnsweep
COPY sweeps ./sweeps
RUN make install
ENV PATH=/opt/nnsweep/.venv/bin:$PATH
ENTRYPOINT ["nnsweep"]
CMD ["--help"]
