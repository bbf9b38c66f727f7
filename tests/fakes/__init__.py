"""Stand-ins the tests share: ``adb`` (an executable, put on ``PATH``), and the Python
helpers of the modules beside it (``from fakes.network import free_port``)."""
