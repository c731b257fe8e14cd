// Runs AsyncAPI's official tools on a document and prints what they found, as one JSON
// object, for crates/mesh-contract/tests/official_tools.rs:
//   node check.mjs DOCUMENT
// - diagnostics: every diagnostic of @asyncapi/parser (severity 0 error, 1 warning, 2 info,
//   3 hint), with its code, message and path;
// - typescript, python: the models @asyncapi/modelina generates, each with its name, its
//   properties (as the model names them, and as they are on the wire) and its code; the
//   properties of an unwrapped dictionary (additionalProperties) are left out.
// Exit 0 when it ran (whatever it found), 2 when it could not.
import { readFile } from 'node:fs/promises';
import { Parser } from '@asyncapi/parser';
import { TypeScriptGenerator, PythonGenerator } from '@asyncapi/modelina';

async function main() {
  const path = process.argv[2];
  if (!path) throw new Error('usage: node check.mjs DOCUMENT');
  const text = await readFile(path, 'utf8');
  const parser = new Parser();
  const { document, diagnostics } = await parser.parse(text);
  const report = {
    diagnostics: diagnostics.map((d) => ({
      severity: d.severity,
      code: String(d.code),
      message: d.message,
      path: d.path.join('/'),
    })),
    typescript: [],
    python: [],
  };
  if (document) {
    for (const [name, generator] of [
      ['typescript', new TypeScriptGenerator({ modelType: 'interface' })],
      ['python', new PythonGenerator()],
    ]) {
      const models = await generator.generate(document);
      report[name] = models.map((m) => ({
        name: m.modelName,
        // Modelina adds a dictionary property holding the properties no schema names (an
        // object's additionalProperties default to true): not a field of the message.
        properties: Object.values(m.model.properties ?? {})
          .filter((p) => p.property?.serializationType !== 'unwrap')
          .map((p) => ({
          name: p.propertyName,
          wire: p.unconstrainedPropertyName,
          required: p.required,
        })),
        code: m.result,
      }));
    }
  }
  process.stdout.write(JSON.stringify(report));
}

main().catch((error) => {
  process.stderr.write(`check.mjs: ${error && error.stack ? error.stack : error}\n`);
  process.exit(2);
});
