// SPDX-License-Identifier: MIT
// An S3-compatible server (s3rver) on loopback for gdal-idem's object-storage tests and
// benchmarks. Usage: node serve.js DATA_DIR PORT REQUEST_LOG BUCKET...
// Prints "listening PORT" once it accepts requests (PORT 0 picks a free one) and appends one
// line per request to REQUEST_LOG: "METHOD /bucket/key?query STATUS", written before the answer
// is sent, so a test can assert that a skip sent no PUT and no DELETE.
//
// One behaviour is made to match Amazon S3: s3rver gives an object completed by a multipart
// upload the MD5 of its whole content as ETag, S3 gives the MD5 of the parts' MD5s plus "-N"
// (so the same bytes uploaded with another part size get another ETag; the tests rely on it).
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const S3rver = require('s3rver');

const [directory, port, requestLog, ...buckets] = process.argv.slice(2);
if (!directory || port === undefined || !requestLog) {
  console.error('usage: node serve.js DATA_DIR PORT REQUEST_LOG BUCKET...');
  process.exit(2);
}
const server = new S3rver({
  address: '127.0.0.1',
  port: Number(port),
  directory,
  silent: true,
  configureBuckets: buckets.map((name) => ({ name })),
});
const completeMultipart = server.store.putObjectMultipart.bind(server.store);
server.store.putObjectMultipart = async (bucket, uploadId, parts) => {
  const uploadDir = path.join(server.store.getResourcePath(bucket, undefined, 'uploads'), uploadId);
  const numbers = parts.map((part) => Number(part.number)).sort((a, b) => a - b);
  const partsMd5 = crypto.createHash('md5');
  for (const number of numbers) {
    partsMd5.update(Buffer.from(fs.readFileSync(path.join(uploadDir, `${number}.md5`), 'utf8'), 'hex'));
  }
  const key = fs.readFileSync(path.join(uploadDir, 'key'), 'utf8');
  const result = await completeMultipart(bucket, uploadId, parts);
  const etag = `${partsMd5.digest('hex')}-${numbers.length}`;
  fs.writeFileSync(server.store.getResourcePath(bucket, key, 'object.md5'), etag);
  return { ...result, md5: etag };
};

// S3RVER_SLOW="<part of a path>:<ms>": reads (GET, HEAD) of such paths are answered that much
// later (for tests of what waits on what). <request log>.arrived gets "ARRIVED <method> <url>"
// when one arrives, and "ANSWERING <method> <url>" once the wait is over, before any byte of the
// answer is sent: a test knows when a client waits for one, and that it has not been answered.
const slow = (process.env.S3RVER_SLOW || '').match(/^(.+):(\d+)$/);
if (slow) {
  server.middleware.unshift(async (ctx, next) => {
    if ((ctx.method === 'GET' || ctx.method === 'HEAD') && ctx.url.includes(slow[1])) {
      fs.appendFileSync(`${requestLog}.arrived`, `ARRIVED ${ctx.method} ${ctx.url}\n`);
      await new Promise((resolve) => setTimeout(resolve, Number(slow[2])));
      fs.appendFileSync(`${requestLog}.arrived`, `ANSWERING ${ctx.method} ${ctx.url}\n`);
    }
    await next();
  });
}

server.run().then((address) => {
  // Logged when the answer's status line is written, before any byte of it can reach the
  // client: a client that has its answer finds its request in the log. (On 'finish', the line
  // came after the answer had been handed to the socket, and a test reading the log as soon as
  // its command returned could miss it.)
  server.httpServer.prependListener('request', (req, res) => {
    const writeHead = res.writeHead;
    res.writeHead = function (...args) {
      const status = typeof args[0] === 'number' ? args[0] : res.statusCode;
      fs.appendFileSync(requestLog, `${req.method} ${req.url} ${status}\n`);
      return writeHead.apply(this, args);
    };
  });
  console.log(`listening ${address.port}`);
}, (error) => {
  console.error(`s3rver failed to start: ${error.message}`);
  process.exit(1);
});
