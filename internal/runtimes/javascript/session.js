'use strict';
/*
 * The protocol loop: messages from the server checked (a malformed one is
 * fatal), then handled one at a time in order: configure, execute (which
 * may await), run (program mode, the last), shutdown. An interrupt is
 * handled as it arrives: it lands on its execution, running or queued
 * (which is then refused as interrupted), and one for an execution that
 * has ended is dropped.
 */

const current = require('./current');
const { execute } = require('./execution');
const { interrupt, announced } = require('./interrupts');
const { runProgram } = require('./program');
const { fatal, send, writeErr } = require('./wire');
const { safeString } = current;
// require()'s global paths come from NODE_PATH at start: a pooled
// runtime takes its session's (airlock_tools' directory) when configured.
const Module = require('module');
const initPaths = Module._initPaths;
const {
  proc, realExit, jsonStringify, ObjectKeys, ObjectEntries, ObjectValues, ArrayIsArray, hasOwn,
} = require('./primordials');

function dispatch(msg) {
  if (msg === null || typeof msg !== 'object' || ArrayIsArray(msg) || typeof msg.type !== 'string') {
    fatal('a message must be an object with a string "type"');
  }
  switch (msg.type) {
    case 'shutdown':
      realExit(0);
      break;
    case 'interrupt': {
      if (typeof msg.id !== 'string') fatal('interrupt needs a string "id"');
      announced();
      const cur = current.execution;
      if (cur && cur.id === msg.id) interrupt(cur);
      for (const m of queue) if (m.type === 'execute' && m.id === msg.id) interruptedEarly.add(m);
      return;
    }
    case 'execute':
      // No code is an empty cell, as '' is: it does nothing.
      if (msg.code === undefined) msg.code = '';
      if (typeof msg.id !== 'string' || typeof msg.code !== 'string') fatal('execute needs a string "id" and a string "code"');
      if (msg.env !== undefined && (msg.env === null || typeof msg.env !== 'object' || ArrayIsArray(msg.env) ||
          ObjectValues(msg.env).some((v) => typeof v !== 'string'))) {
        fatal('execute: "env" must map strings to strings');
      }
      break;
    case 'run': {
      const { id, argv, env, cwd } = msg;
      if (typeof id !== 'string') fatal('run needs a string "id"');
      if (!ArrayIsArray(argv) || argv.length < 2 || argv.some((a) => typeof a !== 'string' || a.includes('\0'))) {
        fatal('run: "argv" must be the interpreter, the program and its arguments, as strings');
      }
      if (env === null || typeof env !== 'object' || ArrayIsArray(env) || ObjectValues(env).some((v) => typeof v !== 'string')) {
        fatal('run: "env" must map strings to strings');
      }
      if (cwd !== undefined && cwd !== null && typeof cwd !== 'string') fatal('run: "cwd" must be a string');
      break;
    }
    case 'configure': {
      const { env, cwd, defaults } = msg;
      for (const [key, m] of [['env', env], ['defaults', defaults]]) {
        if (m === undefined || m === null) continue;
        if (typeof m !== 'object' || ArrayIsArray(m)) fatal(`configure: "${key}" must map strings to strings`);
        for (const v of ObjectValues(m)) if (typeof v !== 'string') fatal(`configure: "${key}" must map strings to strings`);
      }
      if (cwd !== undefined && cwd !== null && typeof cwd !== 'string') fatal('configure: "cwd" must be a string');
      break;
    }
    default:
      fatal(`unknown message type ${jsonStringify(msg.type.slice(0, 32))}`);
  }
  queue.push(msg);
  if (!busy) pump();
}

const queue = [];
let busy = false;
// Queued executions the server interrupted before they started.
const interruptedEarly = new WeakSet();

/** Handles queued messages one at a time (an execution may await). */
async function pump() {
  busy = true;
  try {
    while (queue.length) {
      const msg = queue.shift();
      try {
        if (msg.type === 'configure') configure(msg);
        else if (msg.type === 'run') runProgram(msg);
        else await executeWith(msg.env, () => execute(msg.id, msg.code, interruptedEarly.has(msg)));
      } catch (e) { // a bug in the runtime: note it and go on
        writeErr(`airlock runtime: internal error: ${safeString(() => e.stack, '?')}\n`);
      }
    }
  } finally {
    busy = false;
  }
}

/**
 * Runs an execution with env's variables set for it alone (E2B's runCode
 * envs): afterwards each is what it was before, or unset again.
 */
async function executeWith(env, run) {
  if (!env) return run();
  const saved = [];
  for (const [k, v] of ObjectEntries(env)) {
    saved.push([k, hasOwn(proc.env, k) ? proc.env[k] : undefined]);
    proc.env[k] = v;
  }
  try {
    return await run();
  } finally {
    for (const [k, v] of saved) {
      if (v === undefined) delete proc.env[k];
      else proc.env[k] = v;
    }
  }
}

function configure(msg) {
  const errors = [];
  if (msg.env) {
    try {
      for (const k of ObjectKeys(proc.env)) delete proc.env[k];
      for (const [k, v] of ObjectEntries(msg.env)) proc.env[k] = v;
      if (typeof initPaths === 'function') initPaths.call(Module);
    } catch (e) {
      errors.push(`environment: ${e.message}`);
    }
  }
  if (msg.defaults) {
    try {
      for (const [k, v] of ObjectEntries(msg.defaults)) if (!hasOwn(proc.env, k)) proc.env[k] = v;
    } catch (e) {
      errors.push(`environment: ${e.message}`);
    }
  }
  if (msg.cwd) {
    try {
      proc.chdir(msg.cwd);
    } catch (e) {
      errors.push(`cannot change directory to ${jsonStringify(msg.cwd)}: ${e.code || e.message}`);
    }
  }
  const reply = { type: 'configured' };
  if (errors.length) reply.error = errors.join('; ');
  send(reply);
}

module.exports = { dispatch };
