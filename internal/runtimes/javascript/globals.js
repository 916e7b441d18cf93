'use strict';
/*
 * What the runtime adds to the user's globals, like `node -e`: require
 * (resolving from the current directory, which may change), module,
 * exports, __filename ('[eval]'), __dirname ('.'), and, for transformed
 * cells, import() resolving from the current directory and the interop
 * of `import x from 'm'` (__airlock__).
 */

const path = require('path');
const url = require('url');
const Module = require('module');
const { proc, ObjectDefineProperty, ObjectFreeze } = require('./primordials');

let requireCwd = null;
let requireFn = null;

/** A require() resolving relative to the current directory (which may change). */
function cwdRequire() {
  let cwd;
  try {
    cwd = proc.cwd();
  } catch (_) {
    cwd = '/';
  }
  if (cwd !== requireCwd) {
    requireFn = Module.createRequire(path.join(cwd, '[eval]'));
    requireCwd = cwd;
  }
  return requireFn;
}

const startCwd = (() => { try { return proc.cwd(); } catch (_) { return '/'; } })();
const userModule = new Module('[eval]', null);
userModule.filename = path.join(startCwd, '[eval]');
userModule.paths = Module._nodeModulePaths(startCwd);
userModule.loaded = true;

function userRequire(id) {
  return cwdRequire()(id);
}
userRequire.resolve = function resolve(request, options) {
  return cwdRequire().resolve(request, options);
};
userRequire.resolve.paths = function paths(request) {
  return cwdRequire().resolve.paths(request);
};
userRequire.cache = Module._cache;
userRequire.main = userModule;
userModule.require = userRequire;

/** import(spec) for cells: relative specifiers resolve from the current directory. */
function userImport(specifier) {
  let target = specifier;
  if (typeof specifier === 'string' && !specifier.startsWith('node:') && !/^[a-z][a-z0-9+.-]*:/i.test(specifier)) {
    try {
      if (/^\.{0,2}\//.test(specifier)) {
        target = url.pathToFileURL(path.resolve(proc.cwd(), specifier)).href;
      } else {
        const resolved = cwdRequire().resolve(specifier); // a builtin resolves to its name
        if (path.isAbsolute(resolved)) target = url.pathToFileURL(resolved).href;
      }
    } catch (_) { /* let import() report it */ }
  }
  return import(target);
}

/** What `import x from 'm'` binds for a require()d module. */
function interopDefault(m) {
  return m !== null && typeof m === 'object' && m.__esModule && 'default' in m ? m.default : m;
}

function defineGlobal(name, value) {
  ObjectDefineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
}

/** Defines the user's globals (and display, given here). */
function install(display) {
  defineGlobal('require', userRequire);
  defineGlobal('module', userModule);
  defineGlobal('exports', userModule.exports);
  defineGlobal('__filename', '[eval]');
  defineGlobal('__dirname', '.');
  defineGlobal('display', display);
  ObjectDefineProperty(globalThis, '__airlock__', {
    value: ObjectFreeze({ import: userImport, interopDefault }),
    writable: false, configurable: false, enumerable: false,
  });
}

module.exports = { install };
