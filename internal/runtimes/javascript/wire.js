'use strict';
/*
 * The runtime's descriptors: fds 1 and 2 written synchronously (so every
 * byte an execution wrote is in the pipe before its done is sent), and
 * the control socket on fd 3: frames of a 4-byte big-endian length and
 * UTF-8 JSON, written synchronously too (docs/runtime-protocol.md).
 */

const fs = require('fs');
const net = require('net');
const { Writable } = require('stream');
const {
  proc, realExit, jsonStringify, jsonParse, BufferFrom, BufferAlloc, BufferConcat,
  ObjectDefineProperty, ObjectGetOwnPropertyDescriptor, utf8Decoder,
} = require('./primordials');

const CTL_FD = 3;
const MAX_FRAME = 64 << 20;

// --- synchronous output -----------------------------------------------------

const sleepCell = new Int32Array(new SharedArrayBuffer(4));

/** Writes all of buf to fd, waiting while a non-blocking descriptor is full. */
function writeAll(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      if (e.code === 'EAGAIN') {
        Atomics.wait(sleepCell, 0, 0, 1); // 1 ms, then retry
        continue;
      }
      if (e.code === 'EINTR') continue;
      throw e;
    }
  }
}

/**
 * A stdout/stderr stream that writes synchronously to its descriptor, so
 * output is never queued in the process (and its order with frames on fd 3
 * is the order of the calls).
 */
class SyncOutput extends Writable {
  constructor(fd) {
    super({ decodeStrings: true });
    this.fd = fd;
    this.isTTY = false;
    this._type = 'pipe';
    this._isStdio = true;
  }

  _write(chunk, _encoding, callback) {
    try {
      writeAll(this.fd, chunk);
    } catch (e) {
      if (e.code !== 'EPIPE' && e.code !== 'EBADF') return callback(e);
    }
    callback();
  }

  getColorDepth() { return 1; }
  hasColors() { return false; }
}

/** Replaces process.stdout and process.stderr (and so console.*) by SyncOutputs. */
function installStdio() {
  for (const [name, fd] of [['stdout', 1], ['stderr', 2]]) {
    const stream = new SyncOutput(fd);
    const d = ObjectGetOwnPropertyDescriptor(proc, name);
    ObjectDefineProperty(proc, name, { configurable: true, enumerable: d ? d.enumerable : true, get: () => stream });
  }
}

function writeErr(text) {
  try {
    writeAll(2, BufferFrom(text, 'utf8'));
  } catch (_) { /* stderr gone */ }
}

// --- frames -----------------------------------------------------------------

/** Writes one message on the control socket; a broken socket ends the runtime. */
function send(msg) {
  let body = BufferFrom(jsonStringify(msg), 'utf8');
  if (body.length > MAX_FRAME) body = BufferFrom(jsonStringify(shrink(msg, body.length)), 'utf8');
  const frame = BufferAlloc(4 + body.length);
  frame.writeUInt32BE(body.length, 0);
  body.copy(frame, 4);
  try {
    writeAll(CTL_FD, frame);
  } catch (e) {
    writeErr(`airlock runtime: cannot write to the control socket: ${e.message}\n`);
    realExit(2);
  }
}

/** A stand-in for a message too large for one frame. */
function shrink(msg, size) {
  const note = `[output of ${size} bytes is larger than the ${MAX_FRAME >> 20} MiB frame limit]`;
  if (msg.type === 'display' || msg.type === 'result') return { ...msg, data: { 'text/plain': note }, metadata: {} };
  if (msg.type === 'error') {
    return { ...msg, value: String(msg.value).slice(0, 65536), traceback: [note] };
  }
  return msg;
}

function fatal(why) {
  writeErr(`airlock runtime: fatal protocol error: ${why}\n`);
  realExit(2);
}

/**
 * Reads frames from the control socket and hands each message (a parsed
 * JSON value) to onMessage; end of input ends the runtime (status 0), a
 * malformed frame too (status 2, fatal).
 */
function readFrames(onMessage) {
  let ctl;
  try {
    ctl = new net.Socket({ fd: CTL_FD, readable: true, writable: false });
  } catch (e) {
    writeErr(`airlock runtime: fd ${CTL_FD} is not a usable control socket: ${e.message}\n`);
    realExit(2);
  }
  // Incoming frames: accumulated chunks, decoded as soon as complete.
  let inChunks = [];
  let inLength = 0;
  ctl.on('data', (chunk) => {
    inChunks.push(chunk);
    inLength += chunk.length;
    for (;;) {
      if (inLength < 4) return;
      if (inChunks[0].length < 4) inChunks = [BufferConcat(inChunks, inLength)];
      const n = inChunks[0].readUInt32BE(0);
      if (n === 0 || n > MAX_FRAME) fatal(`frame length ${n}`);
      if (inLength < 4 + n) return; // join the chunks only once the frame is complete
      const buf = inChunks.length === 1 ? inChunks[0] : BufferConcat(inChunks, inLength);
      const body = buf.subarray(4, 4 + n);
      const rest = buf.subarray(4 + n);
      inChunks = rest.length ? [rest] : [];
      inLength = rest.length;
      let msg;
      try {
        msg = jsonParse(utf8Decoder.decode(body));
      } catch (e) {
        fatal(`bad JSON: ${e.message}`);
      }
      onMessage(msg);
    }
  });
  ctl.on('end', () => {
    if (inLength > 0) fatal('truncated frame at end of input');
    realExit(0); // the server closed the socket
  });
  ctl.on('error', (e) => {
    writeErr(`airlock runtime: control socket: ${e.message}\n`);
    realExit(2);
  });
}

module.exports = { writeAll, writeErr, installStdio, send, fatal, readFrames };
