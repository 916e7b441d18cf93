// E2B sandboxes across a restart of the server, through E2B's official JS
// SDK: two sandboxes are paused (one with lifecycle autoResume), the Go
// test (e2e/e2b_test.go, TestE2BSDKRestart) restarts the server on the
// same address, and the same SDK objects, holding the tokens of before,
// go on: the list shows both paused with their metadata, a data-plane
// call resumes the autoResume one, connect resumes the other with the
// same tokens. Not a node:test file: it waits on stdin for the restart.
import assert from 'node:assert/strict'
import { createInterface } from 'node:readline'
import { Sandbox } from '@e2b/code-interpreter'

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]()
const meta = { suite: 'restart', run: String(process.pid) }
const a = await Sandbox.create({ metadata: meta })
const b = await Sandbox.create({ metadata: meta, timeoutMs: 600_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
try {
  await a.runCode('open("/home/user/a.txt", "w").write("kept a")')
  await b.files.write('/home/user/b.txt', 'kept b')
  assert.equal(await a.betaPause(), true)
  assert.equal(await b.betaPause(), true)
  console.log(`PAUSED ${a.sandboxId} ${b.sandboxId}`)
  assert.equal((await lines.next()).value, 'restarted')

  const listed = await Sandbox.list({ query: { metadata: meta } }).nextItems()
  assert.deepEqual(listed.map((s) => [s.sandboxId, s.state, s.metadata.suite]).sort(),
    [[a.sandboxId, 'paused', 'restart'], [b.sandboxId, 'paused', 'restart']].sort())
  assert.deepEqual((await Sandbox.getInfo(b.sandboxId)).lifecycle, { onTimeout: 'pause', autoResume: true })

  // b's SDK object, its token of before: the call resumes it.
  assert.equal(await b.files.read('/home/user/b.txt'), 'kept b')
  // a has no autoResume: paused until connect, which answers its tokens
  // of before; a's own object goes on with them.
  await assert.rejects(a.files.read('/home/user/a.txt'))
  const again = await Sandbox.connect(a.sandboxId)
  assert.equal(again.envdAccessToken, a.envdAccessToken)
  assert.equal(await a.files.read('/home/user/a.txt'), 'kept a')
  const ex = await a.runCode('open("/workspace/a.txt").read()')
  assert.equal(ex.text, "'kept a'")
  console.log('DONE')
} finally {
  await Sandbox.kill(a.sandboxId).catch(() => {})
  await Sandbox.kill(b.sandboxId).catch(() => {})
}
process.exit(0)
