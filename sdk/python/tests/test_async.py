"""AsyncSandbox against a real server: the event loop keeps running while
code runs, callbacks arrive on the loop's thread, async with ends the
session."""

import asyncio
import threading
import unittest

import support
import airlock
from airlock import AsyncSandbox


class AsyncSandboxTest(unittest.TestCase):
    def setUp(self):
        support.need_server(self)

    def test_async_sandbox(self):
        async def main():
            loop_thread = threading.get_ident()
            seen, threads = [], set()

            async def on_stdout(text):  # a coroutine callback
                threads.add(threading.get_ident())
                seen.append(text)

            self.assertEqual([x["name"] for x in await AsyncSandbox.available_secrets()], ["SDK_API_KEY"])
            async with await AsyncSandbox.create() as sbx:
                self.assertEqual(sbx.secrets, [])
                await sbx.run_code("x = 41")
                ticks = 0

                async def tick():
                    nonlocal ticks
                    while True:
                        ticks += 1
                        await asyncio.sleep(0.01)
                ticker = asyncio.ensure_future(tick())
                e = await sbx.run_code("import time\nprint('a', flush=True)\ntime.sleep(0.5)\nx + 1",
                                       on_stdout=on_stdout)
                ticker.cancel()
                self.assertEqual(e.text, "42")
                await asyncio.sleep(0)  # callbacks scheduled before the result are done
                self.assertEqual(seen, ["a\n"])
                self.assertEqual(threads, {loop_thread})
                self.assertGreater(ticks, 10)  # the loop ran while the code slept
                await sbx.files.write("f.txt", "async")
                self.assertEqual(await sbx.files.read("f.txt"), "async")
                self.assertEqual([f.name for f in await sbx.files.list()], ["f.txt"])
                r = await sbx.commands.run("cat f.txt")
                self.assertEqual(r.stdout, "async")
                results = await asyncio.gather(*(sbx.files.read("f.txt") for _ in range(5)))
                self.assertEqual(results, ["async"] * 5)
                sid = sbx.id
            self.assertFalse(await sbx.is_running())
            with self.assertRaises((airlock.SessionEndedError, airlock.NotFoundError)):
                await AsyncSandbox.connect(sid)

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
