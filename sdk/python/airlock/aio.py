"""AsyncSandbox: the Sandbox API for asyncio programs.

Each call runs the blocking client in a worker thread (asyncio.to_thread),
so the event loop never waits on the network; streaming callbacks are
called on the event loop's thread, and may be coroutine functions.

    from airlock import AsyncSandbox

    async with await AsyncSandbox.create() as sbx:
        execution = await sbx.run_code("6 * 7")
"""

import asyncio
import functools
import inspect

from . import sandbox as _sync


def _on_loop(loop, cb):
    """A callback for the worker thread that runs cb on loop (awaited there if it is a coroutine function)."""
    if cb is None:
        return None

    def call(x):
        def run():
            r = cb(x)
            if inspect.isawaitable(r):
                asyncio.ensure_future(r)
        loop.call_soon_threadsafe(run)
    return call


async def _thread(fn, *args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))


class _AsyncProxy:
    """Exposes every method of a sync object as a coroutine function."""

    def __init__(self, target):
        self._target = target

    def __getattr__(self, name):
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        async def method(*args, **kwargs):
            return await _thread(attr, *args, **kwargs)
        return method


class AsyncFiles(_AsyncProxy):
    """``await sbx.files.write(path, data)``, ``read``, ``list``, ``remove``, ``exists``."""


class AsyncCommands(_AsyncProxy):
    """``await sbx.commands.run(cmd, ...)`` and the others of Commands; callbacks run on the event loop."""

    async def run(self, cmd, on_stdout=None, on_stderr=None, **kwargs):
        loop = asyncio.get_running_loop()
        return await _thread(self._target.run, cmd, on_stdout=_on_loop(loop, on_stdout),
                             on_stderr=_on_loop(loop, on_stderr), **kwargs)

    async def connect(self, command_id, on_stdout=None, on_stderr=None, **kwargs):
        loop = asyncio.get_running_loop()
        return await _thread(self._target.connect, command_id, on_stdout=_on_loop(loop, on_stdout),
                             on_stderr=_on_loop(loop, on_stderr), **kwargs)


class AsyncSandbox:
    """A Sandbox for asyncio: ``await AsyncSandbox.create(...)``, ``async with``."""

    def __init__(self, sbx):
        self.sync = sbx
        self.id = sbx.id
        self.language = sbx.language
        self.secrets = sbx.secrets
        self.files = AsyncFiles(sbx.files)
        self.commands = AsyncCommands(sbx.commands)
        self.pty = _AsyncProxy(sbx.pty)

    @classmethod
    async def create(cls, *args, **kwargs):
        return cls(await _thread(_sync.Sandbox.create, *args, **kwargs))

    @classmethod
    async def connect(cls, *args, **kwargs):
        return cls(await _thread(_sync.Sandbox.connect, *args, **kwargs))

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.kill()
        return False

    async def run_code(self, code, on_stdout=None, on_stderr=None, on_result=None, on_error=None, **kwargs):
        loop = asyncio.get_running_loop()
        return await _thread(self.sync.run_code, code, on_stdout=_on_loop(loop, on_stdout),
                             on_stderr=_on_loop(loop, on_stderr), on_result=_on_loop(loop, on_result),
                             on_error=_on_loop(loop, on_error), **kwargs)

    async def kill(self):
        return await _thread(self.sync.kill)

    async def create_code_context(self, *args, **kwargs):
        return await _thread(self.sync.create_code_context, *args, **kwargs)

    async def list_code_contexts(self):
        return await _thread(self.sync.list_code_contexts)

    async def restart_code_context(self, context):
        return await _thread(self.sync.restart_code_context, context)

    async def remove_code_context(self, context):
        return await _thread(self.sync.remove_code_context, context)

    async def interrupt(self):
        return await _thread(self.sync.interrupt)

    async def pause(self, restores=None):
        return await _thread(self.sync.pause, restores)

    async def resume(self, restores=None):
        return await _thread(self.sync.resume, restores)

    async def fork(self):
        return type(self)(await _thread(self.sync.fork))

    async def set_timeout(self, timeout):
        return await _thread(self.sync.set_timeout, timeout)

    async def info(self):
        return await _thread(self.sync.info)

    async def is_running(self):
        return await _thread(self.sync.is_running)

    async def open_port(self, port, public=False):
        return await _thread(self.sync.open_port, port, public)

    async def get_host(self, port):
        return await _thread(self.sync.get_host, port)

    async def ports(self):
        return await _thread(self.sync.ports)

    async def close_port(self, port):
        return await _thread(self.sync.close_port, port)

    async def history(self, after=0):
        return await _thread(self.sync.history, after)

    async def notebook(self, path=None):
        return await _thread(self.sync.notebook, path)

    async def tools(self):
        return await _thread(self.sync.tools)

    @classmethod
    async def available_tools(cls, *args, **kwargs):
        return await _thread(_sync.Sandbox.available_tools, *args, **kwargs)

    @classmethod
    async def available_secrets(cls, *args, **kwargs):
        return await _thread(_sync.Sandbox.available_secrets, *args, **kwargs)

    def __repr__(self):
        return "AsyncSandbox(id=%r, language=%r)" % (self.id, self.language)
