'use strict';
/*
 * What ends an execution before its end: an interrupt (SIGINT, or the
 * server's interrupt message), process.exit() in user code, and an
 * exception thrown by a callback (timer, event, unhandled rejection) while
 * the execution awaits. While no execution runs, SIGINT is ignored,
 * process.exit() too (with a note), and a callback's exception is printed
 * to stderr.
 *
 * SIGINT is taken by the watchdog thread Node's vm uses for breakOnSigint
 * (the one its REPL keeps running), started once here and never stopped,
 * with no process 'SIGINT' listener. Node starts and stops that thread
 * around every breakOnSigint run when nothing else holds it, and stopping
 * it is racy: a SIGINT its thread had not taken yet when the run ended
 * (one that reached execSync's child, which then ended the run) stays
 * counted in its semaphore and breaks off the next run, a later cell that
 * nobody interrupted; and between a run and the process's SIGINT
 * listeners SIGINT is left at its default action, which kills the
 * runtime. Kept running, the thread takes every SIGINT: during a run it
 * breaks the run off; otherwise it notes it, and takeSigint() reads the
 * note (an execution looks before its synchronous part, inside the run,
 * and polls while it awaits).
 */

const current = require('./current');
const { describeError } = require('./tracebacks');
const { writeErr } = require('./wire');
const { proc, ObjectDefineProperty, hasOwn, HostPromise, hostSetTimeout, DateNow } = require('./primordials');

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

/**
 * Interrupts execution cur: at once if it awaits, else when its
 * synchronous part ends (SIGINT breaks that off; this is the server's
 * message, which the runtime reads only between JavaScript runs).
 */
function interrupt(cur) {
  cur.interrupted = true;
  if (cur.async && cur.failure === undefined) {
    cur.failure = INTERRUPT;
    cur.abort(INTERRUPT);
  }
}

// The watchdog's controls (the REPL's), or null on a Node without them.
let watchdog = null;

/**
 * Whether the watchdog noted a SIGINT that no breakOnSigint run took
 * (forgetting it). With the watchdog kept running, starting and stopping
 * it once more only counts up and down, and the stop returns the note.
 */
function noted() {
  if (!watchdog) return false;
  watchdog.startSigintWatchdog();
  return watchdog.stopSigintWatchdog() === true;
}

// The server sends each interrupt message just before its SIGINT. Counted
// here: the messages read (announced) and the SIGINTs taken (a run broken
// off, or a note). A SIGINT is taken late when the watchdog's thread is
// slow to run (a loaded machine): one that came for an execution which has
// ended must not break off the next, so an execution starts only once the
// SIGINTs of every message read before it are taken (settle).
let announcedCount = 0;
let takenCount = 0;

/** The server's interrupt message was read. */
function announced() { announcedCount++; }

/** A breakOnSigint run was broken off: its SIGINT is taken. */
function brokeOff() { takenCount++; }

/**
 * Takes a SIGINT the watchdog noted, and reports whether it is one no
 * message announced (yet): the running execution's. Without the kept
 * watchdog SIGINT comes to onSigint instead.
 */
function takeSigint() {
  if (!noted()) return false;
  takenCount++;
  return takenCount > announcedCount;
}

const sleep = (ms) => new HostPromise((resolve) => hostSetTimeout(resolve, ms));

// How long an execution waits for the SIGINTs the server announced before
// it starts anyway (one lost: a SIGINT the watchdog noted as a run ended,
// which vm's end of the run forgets).
const SETTLE_MS = 1000;

/** Waits until every announced SIGINT is taken; forgets the ones no message announced. */
async function settle() {
  if (noted()) takenCount++;
  if (takenCount < announcedCount) {
    const deadline = DateNow() + SETTLE_MS;
    for (;;) {
      if (noted()) takenCount++;
      if (takenCount >= announcedCount || DateNow() > deadline) break;
      await sleep(1);
    }
  }
  takenCount = announcedCount;
}

/** Whether SIGINT is the kept watchdog's (else: vm's own, and onSigint). */
const watchdogKept = () => watchdog !== null;

function onSigint() {
  const cur = current.execution;
  if (cur) interrupt(cur); // while idle: nothing to do
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

/**
 * Keeps SIGINT the watchdog's: a cell's process.on('SIGINT') would have
 * Node install its own handler in the watchdog's place (and vm take it
 * away around every run, leaving SIGINT at its default action). The
 * listeners are kept, never called.
 */
function keepSigintFromListeners() {
  for (const [event, name] of [['newListener', 'startListeningIfSignal'], ['removeListener', 'stopListeningIfSignal']]) {
    for (const l of proc.listeners(event)) {
      if (l.name !== name) continue;
      proc.removeListener(event, l);
      proc.on(event, function signalsButSigint(type, ...rest) {
        if (type !== 'SIGINT') return l.call(this, type, ...rest);
        return undefined;
      });
    }
  }
}

/** Installs process.exit, SIGINT's watchdog and the uncaught-error handlers. */
function install() {
  proc.exit = exit;
  try {
    const c = proc.binding('contextify');
    if (typeof c.startSigintWatchdog === 'function' && typeof c.stopSigintWatchdog === 'function' &&
        c.startSigintWatchdog() === true) {
      watchdog = c;
    }
  } catch (_) { /* an older or newer Node: vm's own watchdog */ }
  if (watchdog) keepSigintFromListeners();
  else proc.on('SIGINT', onSigint);
  proc.on('uncaughtException', onUncaught);
  proc.on('unhandledRejection', onUncaught);
}

module.exports = {
  INTERRUPT, exitCodeOf, install, interrupt, announced, brokeOff, takeSigint, settle, watchdogKept,
};
