// E2B sandboxes across a kill -9 of the server, through E2B's official
// JS SDK: two live sandboxes (never paused; one with lifecycle
// autoResume) write files; the Go test (e2e/e2b_test.go,
// TestE2BSDKKilled) kills the server with SIGKILL and starts it again
// on the same address; both sandboxes are listed paused (recovered from
// their last completed operation), a data-plane call resumes the
// autoResume one, connect the other with the same tokens. Not a
// node:test file: it waits on stdin for the restart.
import assert from 'node:assert/strict'
import { createInterface } from 'node:readline'
import { Sandbox } from '@e2b/code-interpreter'

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]()
const meta = { suite: 'killed', run: String(process.pid) }
const a = await Sandbox.create({ metadata: meta })
const b = await Sandbox.create({ metadata: meta, timeoutMs: 600_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
try {
  await a.runCode('open("/home/user/a.txt", "w").write("kept a")')
  await b.files.write('/home/user/b.txt', 'kept b')
  console.log(`LIVE ${a.sandboxId} ${b.sandboxId}`)
  assert.equal((await lines.next()).value, 'restarted')

  const listed = await Sandbox.list({ query: { metadata: meta } }).nextItems()
  assert.deepEqual(listed.map((s) => [s.sandboxId, s.state]).sort(),
    [[a.sandboxId, 'paused'], [b.sandboxId, 'paused']].sort())
  // b's SDK object, its token of before: the call resumes it.
  assert.equal(await b.files.read('/home/user/b.txt'), 'kept b')
  // a: connect resumes it, with its tokens of before.
  const again = await Sandbox.connect(a.sandboxId)
  assert.equal(again.envdAccessToken, a.envdAccessToken)
  assert.equal(await a.files.read('/home/user/a.txt'), 'kept a')
  console.log('DONE')
} finally {
  await Sandbox.kill(a.sandboxId).catch(() => {})
  await Sandbox.kill(b.sandboxId).catch(() => {})
}
process.exit(0)
