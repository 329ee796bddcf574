/**
 * Imported first by every bin, so it runs before anything that needs a newer Node: an older one is
 * refused with its version named, instead of failing later in a way that names nothing.
 */
export const MIN_NODE_MAJOR = 22;

const major = Number(process.versions.node.split('.')[0]);
if (!(major >= MIN_NODE_MAJOR)) {
  const bin = (process.argv[1] ?? 'kici').split('/').pop()!.replace(/\.js$/, '');
  process.stderr.write(
    `${bin}: needs Node.js ${MIN_NODE_MAJOR} or newer; this is Node.js ${process.versions.node} (${process.execPath}). Install a newer Node.js and run it with that.\n`,
  );
  process.exit(1);
}
