// Answers CouchDB Mango queries with PouchDB (pouchdb-find, in memory),
// which implements CouchDB's query language in JavaScript: the oracle
// weft's JSON queries are checked against (tests/fabric_compat/mango.rs).
//
//   node mango.js <cases.json>
//
// cases.json: {docs: [{_id, ...}], indexes: [[field, ...], ...],
// queries: [query, ...]}. Prints a JSON array: for each query, the
// documents found, in order, each {id, doc} with `doc` stripped of _id and
// _rev; or {error} if PouchDB refused the query.
'use strict';

const fs = require('node:fs');
const PouchDB = require('pouchdb-core')
    .plugin(require('pouchdb-adapter-memory'))
    .plugin(require('pouchdb-find'));

async function main() {
    const cases = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
    const db = new PouchDB('oracle', { adapter: 'memory' });
    await db.bulkDocs(cases.docs);
    for (const fields of cases.indexes) {
        await db.createIndex({ index: { fields } });
    }
    const answers = [];
    for (const query of cases.queries) {
        try {
            // CouchDB's _find returns 25 documents unless told; Fabric
            // always tells it.
            // With `fields`, Fabric asks for `_id` too, to know the key.
            const fields = query.fields ? { fields: [...query.fields, '_id'] } : {};
            const found = await db.find({ limit: 100000, ...query, ...fields });
            answers.push(found.docs.map(({ _id, _rev, ...doc }) => ({ id: _id, doc })));
        } catch (err) {
            answers.push({ error: err.message });
        }
    }
    console.log(JSON.stringify(answers));
}

main().catch((err) => {
    console.error(err);
    process.exit(1);
});
