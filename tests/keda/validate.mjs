// Validate the KEDA objects given as a JSON array on stdin against KEDA's CRD schemas
// (@kubernetes-models/keda). Exit 0 when every one is valid; else 1, each error on stderr.
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject";
import { TriggerAuthentication } from "@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication";

const kinds = { ScaledObject, TriggerAuthentication };
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
let failed = 0;
for (const doc of JSON.parse(Buffer.concat(chunks).toString())) {
  const Model = kinds[doc.kind];
  if (!Model) {
    console.error(`${doc.kind}: no KEDA schema here`);
    failed += 1;
    continue;
  }
  try {
    new Model(doc).validate();
    console.log(`${doc.kind}/${doc.metadata?.name}: valid`);
  } catch (err) {
    console.error(`${doc.kind}/${doc.metadata?.name}: ${err.message}`);
    failed += 1;
  }
}
process.exit(failed ? 1 : 0);
