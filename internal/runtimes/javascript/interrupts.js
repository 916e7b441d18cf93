'use strict';
/*
 * What ends an execution before its end: SIGINT, process.exit() in user
 * code, and an exception thrown by a callback (timer, event, unhandled
 * rejection) while the execution awaits. SIGINT during synchronous code is
 * vm's breakOnSigint (execution.js); here is the rest. While no execution
 * runs, SIGINT is ignored, process.exit() too (with a note), and a
 * callback's exception is printed to stderr.
 */

const current = require('./current');
const { describeError } = require('./tracebacks');
const { writeErr } = require('./wire');
const { proc, ObjectDefineProperty, hasOwn } = require('./primordials');

const { safeString } = current;

const kExitCode = Symbol('airlock.exitCode');
const INTERRUPT = Symbol('airlock.interrupt');

/**
 * process.exit for user code: ends the execution instead of the runtime.
 * The SystemExit error carries the exit code: 0 for a clean exit, else the
 * status a process would have (n & 0xff, or 1 when that is 0 or n is not an
 * integer).
 */
function exit(code) {
  if (code === undefined) code = proc.exitCode;
  let n = code === undefined || code === null ? 0 : Number(code);
  if (n !== 0) n = (Number.isInteger(n) && n & 0xff) || 1;
  const err = new Error(`process.exit(${code === undefined ? '' : safeString(() => String(code), '?')})`);
  err.name = 'SystemExit';
  ObjectDefineProperty(err, kExitCode, { value: n, enumerable: false });
  Error.captureStackTrace(err, exit);
  throw err;
}

const exitCodeOf = (e) => (e !== null && typeof e === 'object' && hasOwn(e, kExitCode) ? e[kExitCode] : undefined);

/** Ends the running execution's wait with why (an error, exit or INTERRUPT). */
function abortCurrent(why) {
  const cur = current.execution;
  if (!cur || !cur.async || cur.failure !== undefined) return false;
  cur.failure = why;
  cur.abort(why);
  return true;
}

function onSigint() {
  abortCurrent(INTERRUPT); // while idle: nothing to do
}

/** uncaughtException and unhandledRejection: end a waiting execution, else report on stderr. */
function onUncaught(err) {
  if (abortCurrent(err)) return;
  if (exitCodeOf(err) !== undefined) {
    writeErr(`airlock: ${safeString(() => err.message, 'process.exit()')} ignored: no execution is running\n`);
    return;
  }
  const d = describeError(err, false);
  writeErr(`Uncaught ${d.traceback.join('\n')}\n`);
}

/** Installs process.exit and the process's SIGINT and uncaught-error handlers. */
function install() {
  proc.exit = exit;
  proc.on('SIGINT', onSigint);
  proc.on('uncaughtException', onUncaught);
  proc.on('unhandledRejection', onUncaught);
}

module.exports = { INTERRUPT, exitCodeOf, install };
