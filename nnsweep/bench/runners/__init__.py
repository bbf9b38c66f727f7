"""One runner module per runtime, imported lazily through :mod:`nnsweep.core.runtimes`."""
