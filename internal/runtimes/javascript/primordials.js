'use strict';
/*
 * The built-ins the runtime uses, taken when it starts, before any cell
 * runs (as Node's own primordials): user code runs in the runtime's realm
 * and may replace JSON, Promise, Object.keys, Buffer.from..., which must
 * not break the protocol.
 */

const util = require('util');

const ObjectProto = Object.prototype;
const hasOwnProperty = ObjectProto.hasOwnProperty;

module.exports = Object.freeze({
  proc: process,
  realExit: process.exit.bind(process),
  jsonStringify: JSON.stringify,
  jsonParse: JSON.parse,
  BufferFrom: Buffer.from,
  BufferAlloc: Buffer.allocUnsafe,
  BufferConcat: Buffer.concat,
  isBuffer: Buffer.isBuffer,
  HostPromise: Promise,
  promiseRace: Promise.race.bind(Promise),
  hostSetImmediate: setImmediate,
  hostSetInterval: setInterval,
  hostSetTimeout: setTimeout,
  DateNow: Date.now,
  hostClearInterval: clearInterval,
  inspect: util.inspect,
  isPromise: util.types.isPromise,
  isNativeError: util.types.isNativeError,
  ObjectKeys: Object.keys,
  ObjectEntries: Object.entries,
  ObjectValues: Object.values,
  ObjectFreeze: Object.freeze,
  ArrayIsArray: Array.isArray,
  ObjectGetPrototypeOf: Object.getPrototypeOf,
  ObjectDefineProperty: Object.defineProperty,
  ObjectGetOwnPropertyDescriptor: Object.getOwnPropertyDescriptor,
  ObjectProto,
  hasOwn: (o, k) => hasOwnProperty.call(o, k),
  utf8Decoder: new TextDecoder('utf-8', { fatal: true }),
});
