'use strict';
/*
 * Program mode: the server's run message starts `node FILE ARGS` instead of
 * cells; the runtime's last act.
 */

const fs = require('fs');
const { spawnSync } = require('child_process');
const { constants: osConstants } = require('os');
const { realExit } = require('./primordials');
const { send, writeErr } = require('./wire');

/**
 * Program mode: runs `node FILE ARGS` as a child on the runtime's stdout and
 * stderr (stdin empty), sends one done with its exit status (128+N for a
 * signal) and exits. A program run is the runtime's last act; nothing of the
 * session's globals reaches the program, which gets a fresh Node.
 */
function runProgram(msg) {
  const r = spawnSync(msg.argv[0], msg.argv.slice(1), {
    stdio: ['ignore', 1, 2], env: msg.env, cwd: msg.cwd || undefined, windowsHide: true,
  });
  let code;
  if (r.error) {
    writeErr(`airlock: cannot start ${msg.argv[0]}: ${r.error.message}\n`);
    code = 127;
  } else if (r.status !== null) {
    code = r.status;
  } else {
    code = 128 + (osConstants.signals[r.signal] || 0);
  }
  send({ type: 'done', id: msg.id, status: 'exited', execution_count: 1, exit_code: code });
  for (const fd of [1, 2]) {
    try { fs.closeSync(fd); } catch (_) { /* already closed */ }
  }
  realExit(code);
}

module.exports = { runProgram };
