/**
 * The deployment files, checked offline against the schemas of the programs that read them:
 * - every Kubernetes manifest under deploy/k8s against Kubernetes' OpenAPI schemas (1.33), as
 *   compiled into the validators of `kubernetes-models`; the KEDA ScaledObject against KEDA's CRD
 *   schema from `@kubernetes-models/keda`. Neither rejects unknown fields (the OpenAPI schemas
 *   leave additionalProperties open), so a TypeScript excess-property check against the same
 *   packages' types catches misspelt fields;
 * - docker-compose.yml against the Compose Specification's JSON schema, vendored from compose-go
 *   (test/fixtures/schemas/README.md);
 * - what no schema sees: the values that tie the files to each other and to the image.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, Server } from 'node:http';
import { AddressInfo } from 'node:net';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import ts from 'typescript';
import Ajv2020 from 'ajv/dist/2020';
import { parse, parseAllDocuments } from 'yaml';
import { ConfigMap, Namespace, Secret, Service } from 'kubernetes-models/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { workflowCodeHash } from '../../src/temporal/bundle';
import type { IConfigMap } from 'kubernetes-models/v1/ConfigMap';
import type { ISecret } from 'kubernetes-models/v1/Secret';
import type { IService } from 'kubernetes-models/v1/Service';
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import type { IPodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import type { IHorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import type { IScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject';
import { workerSettings } from '../../src/cli/processes';
import { temporalConfig, WORKER_PROCESS_ENV } from '../../src/config';
import { parseDuration } from '../../src/core/duration';

const ROOT = join(__dirname, '..', '..');
const K8S = join(ROOT, 'deploy', 'k8s');
const SCHEMAS = join(ROOT, 'test', 'fixtures', 'schemas');

interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

interface Loaded {
  file: string;
  doc: Manifest;
}

/** Every kind deploy/k8s may hold: its validating model class and the module and type of its TypeScript interface. */
const KINDS: Record<string, { model: new (data: never) => { validate(): void }; types: [string, string] }> = {
  'v1/Namespace': { model: Namespace, types: ['kubernetes-models/v1/Namespace', 'INamespace'] },
  'v1/ConfigMap': { model: ConfigMap, types: ['kubernetes-models/v1/ConfigMap', 'IConfigMap'] },
  'v1/Secret': { model: Secret, types: ['kubernetes-models/v1/Secret', 'ISecret'] },
  'v1/Service': { model: Service, types: ['kubernetes-models/v1/Service', 'IService'] },
  'apps/v1/Deployment': { model: Deployment, types: ['kubernetes-models/apps/v1/Deployment', 'IDeployment'] },
  'policy/v1/PodDisruptionBudget': { model: PodDisruptionBudget, types: ['kubernetes-models/policy/v1/PodDisruptionBudget', 'IPodDisruptionBudget'] },
  'autoscaling/v2/HorizontalPodAutoscaler': {
    model: HorizontalPodAutoscaler,
    types: ['kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler', 'IHorizontalPodAutoscaler'],
  },
  'keda.sh/v1alpha1/ScaledObject': { model: ScaledObject, types: ['@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject', 'IScaledObject'] },
};

function yamlFiles(dir: string, prefix = ''): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((name) => {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) return yamlFiles(path, `${prefix}${name}/`);
      return /\.ya?ml$/.test(name) ? [`${prefix}${name}`] : [];
    });
}

function parseDocuments(text: string, file: string): unknown[] {
  return Array.from(parseAllDocuments(text), (document) => {
    if (document.errors.length > 0) throw new Error(`${file}: ${document.errors.map((e) => e.message).join('; ')}`);
    return document.toJS() as unknown;
  }).filter((doc) => doc !== null && doc !== undefined);
}

function loadManifests(): Loaded[] {
  return yamlFiles(K8S)
    .filter((file) => basename(file) !== 'kustomization.yaml')
    .flatMap((file) => parseDocuments(readFileSync(join(K8S, file), 'utf8'), file).map((doc) => ({ file, doc: doc as Manifest })));
}

/** The schema's verdict: undefined when valid, else the validator's message. */
function schemaErrors(doc: Manifest): string | undefined {
  const kind = KINDS[`${doc.apiVersion}/${doc.kind}`];
  if (!kind) return `no schema for ${doc.apiVersion} ${doc.kind}`;
  try {
    new kind.model(doc as never).validate();
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

/**
 * Type-checks each manifest as an object literal of its kubernetes-models interface: TypeScript's
 * excess-property check reports fields the API does not have (`spec.replica`), which the JSON
 * schemas let through. One diagnostic line per problem, prefixed with the manifest's label.
 */
function unknownFieldErrors(items: { label: string; doc: Manifest }[]): string[] {
  const fileName = join(ROOT, 'test', 'unit', '__deploy_manifests__.ts');
  const lines = items.flatMap(({ doc }, i) => {
    const [module, type] = KINDS[`${doc.apiVersion}/${doc.kind}`].types;
    return [`import type { ${type} as T${i} } from '${module}';`, `export const m${i}: T${i} = ${JSON.stringify(doc)};`];
  });
  const source = lines.join('\n');
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
    lib: ['lib.es2022.d.ts'],
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.CommonJS,
    moduleResolution: ts.ModuleResolutionKind.Node10,
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, ...rest) =>
    name === fileName ? ts.createSourceFile(name, source, version) : getSourceFile(name, version, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === fileName || fileExists(name);
  const program = ts.createProgram([fileName], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : -1;
    const item = line >= 0 ? items[Math.floor(line / 2)] : undefined;
    return `${item ? item.label : '?'}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
  });
}

function clone<T>(value: T): T {
  return JSON.parse(JSON.stringify(value)) as T;
}

/** A deep copy of `doc` with the value at `path` replaced (or deleted, for undefined). */
function withChange(doc: unknown, path: (string | number)[], value: unknown): Manifest {
  const copy = clone(doc) as Record<string | number, unknown>;
  let node = copy;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string | number, unknown>;
  const last = path[path.length - 1];
  if (value === undefined) delete node[last];
  else node[last] = value;
  return copy as unknown as Manifest;
}

const manifests = loadManifests();

/** The example of PgBouncer with the switch worker beside it (cutover.switch: pgbouncer). */
const SWITCH_FILE = 'optional/pgbouncer-switch.yaml';

/** The worker pool's one object of `kind` (the switch example's own objects aside). */
function only<T>(kind: string): T {
  const found = manifests.filter((m) => m.doc.kind === kind && m.file !== SWITCH_FILE);
  if (found.length !== 1) throw new Error(`expected one ${kind} in deploy/k8s, found ${found.length}`);
  return found[0].doc as unknown as T;
}

const deployment = only<IDeployment>('Deployment');
const podSpec = deployment.spec!.template.spec!;
const worker = podSpec.containers.find((c) => c.name === 'worker')!;
const configMap = only<IConfigMap>('ConfigMap');
const secret = only<ISecret>('Secret');

/** The worker container's environment as the kubelet builds it: envFrom sources, then env. */
function workerEnv(): Map<string, string | undefined> {
  const env = new Map<string, string | undefined>();
  for (const source of worker.envFrom ?? []) {
    const ref = source.configMapRef ?? source.secretRef;
    const kind = source.configMapRef ? 'ConfigMap' : 'Secret';
    const target = manifests.find(
      (m) => m.doc.kind === kind && m.doc.metadata.name === ref?.name && m.doc.metadata.namespace === deployment.metadata?.namespace,
    );
    if (!target) throw new Error(`envFrom refers to ${kind} ${ref?.name}, which deploy/k8s does not define in the Deployment's namespace`);
    const data = { ...((target.doc.data as Record<string, string>) ?? {}), ...((target.doc.stringData as Record<string, string>) ?? {}) };
    for (const [key, value] of Object.entries(data)) env.set(`${source.prefix ?? ''}${key}`, value);
  }
  for (const variable of worker.env ?? []) env.set(variable.name, variable.value);
  return env;
}

/**
 * The variables a command or args entry references with Kubernetes' `$(VAR)` syntax (`$$` escapes).
 * The kubelet leaves an undefined reference as literal text, so the worker would get "$(VAR)".
 */
function references(text: string): string[] {
  return [...text.matchAll(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)].flatMap((m) => (m[1] ? [m[1]] : []));
}

function containerPort(port: number | string | undefined): number | undefined {
  if (typeof port === 'number') return port;
  return worker.ports?.find((p) => p.name === port)?.containerPort;
}

function matches(selector: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  return !!selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);
}

function dockerfile(): { from: string; user: string; entrypoint: string[]; cmd: string[]; runs: string[]; env: Record<string, string> } {
  const text = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
  const all = (name: string) => [...text.matchAll(new RegExp(`^${name}\\s+(.+)$`, 'gm'))].map((m) => m[1].trim());
  const instruction = (name: string) => all(name).pop() ?? '';
  return {
    runs: all('RUN'),
    env: Object.fromEntries(all('ENV').map((e) => e.split('=', 2) as [string, string])),
    from: instruction('FROM'),
    user: instruction('USER'),
    entrypoint: JSON.parse(instruction('ENTRYPOINT')) as string[],
    cmd: JSON.parse(instruction('CMD')) as string[],
  };
}

describe('the Kubernetes manifests in deploy/k8s', () => {
  it('are all known kinds that pass their Kubernetes (or KEDA CRD) schema', () => {
    expect(manifests.length).toBeGreaterThanOrEqual(8);
    const verdicts = manifests.map(({ file, doc }) => [`${file} ${doc.kind}/${doc.metadata?.name}`, schemaErrors(doc)]);
    expect(verdicts.filter(([, error]) => error !== undefined)).toEqual([]);
    expect(new Set(manifests.map((m) => m.doc.kind))).toEqual(
      new Set(['Namespace', 'ConfigMap', 'Secret', 'Deployment', 'Service', 'PodDisruptionBudget', 'HorizontalPodAutoscaler', 'ScaledObject']),
    );
  });

  it('have no field that their kind does not define', () => {
    expect(unknownFieldErrors(manifests.map(({ file, doc }) => ({ label: `${file} ${doc.kind}`, doc })))).toEqual([]);
  });

  it('would be rejected if broken: wrong types, missing fields, unknown kinds and misspelt fields', () => {
    const port = ['spec', 'template', 'spec', 'containers', 0, 'ports', 0, 'containerPort'];
    expect(schemaErrors(withChange(deployment, port, '9464'))).toMatch(/containerPort must be integer/);
    expect(schemaErrors(withChange(deployment, ['spec', 'template', 'spec', 'containers'], undefined))).toMatch(
      /must have required property .?containers/,
    );
    const queueSize = ['spec', 'triggers', 0, 'metadata', 'targetQueueSize'];
    expect(schemaErrors(withChange(only<IScaledObject>('ScaledObject'), queueSize, 8))).toMatch(/targetQueueSize must be string/);
    expect(schemaErrors({ apiVersion: 'apps/v1beta1', kind: 'Deployment', metadata: { name: 'x' } })).toMatch(/no schema/);

    const errors = unknownFieldErrors([
      { label: 'replica', doc: withChange(deployment, ['spec', 'replica'], 3) },
      { label: 'readinesProbe', doc: withChange(deployment, ['spec', 'template', 'spec', 'containers', 0, 'readinesProbe'], {}) },
    ]);
    expect(errors.find((e) => e.startsWith('replica:'))).toMatch(/'"replica"' does not exist in type 'IDeploymentSpec'/);
    expect(errors.find((e) => e.startsWith('readinesProbe:'))).toMatch(/'"readinesProbe"' does not exist in type '\w*Container'/);
    expect(errors).toHaveLength(2);
  });

  it('live in one namespace, the one kustomization.yaml sets', () => {
    const kustomization = parse(readFileSync(join(K8S, 'kustomization.yaml'), 'utf8')) as { namespace: string };
    const namespace = only<Manifest>('Namespace').metadata.name;
    expect(kustomization.namespace).toBe(namespace);
    for (const { file, doc } of manifests.filter((m) => m.doc.kind !== 'Namespace')) {
      expect([file, doc.metadata.namespace]).toEqual([file, namespace]);
    }
  });

  it('pair PgBouncer with a switch worker that serves its own queue and rewrites the file PgBouncer includes', () => {
    const objects = manifests.filter((m) => m.file === SWITCH_FILE).map((m) => m.doc);
    expect(objects.map((o) => o.kind).sort()).toEqual(['ConfigMap', 'Deployment', 'Service']);
    const pooler = objects.find((o) => o.kind === 'Deployment') as unknown as IDeployment;
    const [pgbouncer, switcher] = ['pgbouncer', 'switch'].map((name) => pooler.spec!.template.spec!.containers.find((c) => c.name === name)!);
    // The switch worker: `ferry worker --task-queue Q`, a queue the worker parses, with connections for the admin console and the target.
    expect(switcher.args?.slice(0, 2)).toEqual(['worker', '--task-queue']);
    expect(switcher.args![2]).toMatch(/^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/);
    expect((switcher.env ?? []).map((e) => e.name)).toEqual(expect.arrayContaining(['TEMPORAL_ADDRESS', 'FERRY_CONN_PGBOUNCER_ADMIN', 'FERRY_CONN_V2']));
    // The file pgbouncer.ini %includes is on a volume both containers mount, writable (not the ConfigMap's).
    const config = (objects.find((o) => o.kind === 'ConfigMap')!.data as Record<string, string>)['pgbouncer.ini'];
    const included = /^%include (\S+)$/m.exec(config)![1];
    expect(config).toMatch(/^pool_mode = transaction$/m);
    const mountOf = (c: typeof switcher, file: string) => c.volumeMounts?.find((m) => file.startsWith(`${m.mountPath}/`))?.name;
    expect(mountOf(pgbouncer, included)).toBeDefined();
    expect(mountOf(switcher, included)).toBe(mountOf(pgbouncer, included));
    expect(pooler.spec!.template.spec!.volumes!.find((v) => v.name === mountOf(switcher, included))).toMatchObject({ emptyDir: {} });
  });

  it('are listed in kustomization.yaml, except the example Secret and the optional KEDA object', () => {
    const kustomization = parse(readFileSync(join(K8S, 'kustomization.yaml'), 'utf8')) as { resources: string[] };
    const core = yamlFiles(K8S).filter((f) => !f.includes('/') && f !== 'kustomization.yaml' && f !== 'secret.example.yaml');
    expect([...kustomization.resources].sort()).toEqual(core.sort());
    expect(kustomization.resources).not.toContain('secret.example.yaml');
    expect(kustomization.resources.some((r) => r.startsWith('optional'))).toBe(false);
  });

  it('carry only placeholders in the example Secret', () => {
    expect(secret.metadata?.name).toBe('ferry-connections');
    const values = Object.entries(secret.stringData ?? {});
    expect(values.map(([key]) => key).sort()).toEqual(['FERRY_CONN_LEGACY', 'FERRY_CONN_V2', 'FERRY_SECRET_HOOK']);
    for (const [key, value] of values) {
      expect([key, value]).toEqual([key, expect.stringContaining('REPLACE_ME')]);
      if (key.startsWith('FERRY_CONN_')) expect(value).toMatch(/^postgres(ql)?:\/\//);
    }
    expect(secret.data).toBeUndefined();
  });
});

describe('the worker Deployment', () => {
  it('runs `ferry worker` through the image entrypoint, with the image docker-compose builds', () => {
    const image = dockerfile();
    expect(image.entrypoint).toEqual(['node', 'bin/ferry.js']);
    // No `command`: it would replace the ENTRYPOINT; args replace CMD.
    expect(worker.command).toBeUndefined();
    expect(worker.args?.[0]).toBe('worker');
    const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')) as { services: Record<string, { image?: string }> };
    expect(worker.image).toBe(compose.services['ferry-worker'].image);
  });

  it('defines every environment variable it references, and what a worker needs', () => {
    const env = workerEnv();
    const unresolved = [...(worker.command ?? []), ...(worker.args ?? [])].flatMap(references).filter((name) => !env.has(name));
    expect(unresolved).toEqual([]);
    for (const variable of worker.env ?? []) {
      const ref = variable.valueFrom?.configMapKeyRef ?? variable.valueFrom?.secretKeyRef;
      if (!ref) continue;
      const source = ref === variable.valueFrom?.configMapKeyRef ? configMap.data : { ...secret.data, ...secret.stringData };
      expect([variable.name, Object.keys(source ?? {})]).toEqual([variable.name, expect.arrayContaining([ref.key])]);
    }
    for (const name of ['TEMPORAL_ADDRESS', 'TEMPORAL_NAMESPACE', 'FERRY_TASK_QUEUE', 'FERRY_WORKER_CONCURRENCY', 'FERRY_METRICS_PORT', 'FERRY_LOG_LEVEL']) {
      expect([name, env.has(name)]).toEqual([name, true]);
    }
    expect([...env.keys()].filter((name) => name.startsWith('FERRY_CONN_')).length).toBeGreaterThan(0);
    expect(Number(env.get('FERRY_WORKER_CONCURRENCY'))).toBeGreaterThan(0);
  });

  it('takes its settings from the ConfigMap, as the worker parses them', () => {
    // `worker` alone: any flag would override the ConfigMap's FERRY_* values.
    expect(worker.args).toEqual(['worker']);
    const env = Object.fromEntries([...workerEnv()].map(([name, value]) => [name, value ?? '']));
    const settings = workerSettings({}, env);
    expect(settings.concurrency).toBe(8);
    expect(settings.metricsPort).toBe(worker.ports?.find((p) => p.name === 'metrics')?.containerPort);
    expect(temporalConfig(env)).toEqual({
      address: configMap.data?.TEMPORAL_ADDRESS,
      namespace: configMap.data?.TEMPORAL_NAMESPACE,
      taskQueue: configMap.data?.FERRY_TASK_QUEUE,
    });
    // Kubernetes SIGKILLs at terminationGracePeriodSeconds: in-flight batches need the whole
    // shutdown grace before that, plus time to close pools and the Temporal connection.
    expect(settings.shutdownGrace).toBe(parseDuration(configMap.data?.FERRY_SHUTDOWN_GRACE ?? ''));
    expect(podSpec.terminationGracePeriodSeconds! * 1000).toBeGreaterThan(settings.shutdownGrace);
  });

  it('serves probes, the Service and Prometheus on the one port FERRY_METRICS_PORT names', () => {
    const port = Number(configMap.data?.FERRY_METRICS_PORT);
    expect(port).toBe(9464);
    const metrics = worker.ports?.find((p) => p.name === 'metrics');
    expect(metrics?.containerPort).toBe(port);
    expect(worker.readinessProbe?.httpGet?.path).toBe('/readyz');
    expect(worker.livenessProbe?.httpGet?.path).toBe('/healthz');
    for (const probe of [worker.readinessProbe, worker.livenessProbe, worker.startupProbe]) {
      expect(containerPort(probe?.httpGet?.port)).toBe(port);
    }
    const annotations = deployment.spec!.template.metadata?.annotations ?? {};
    expect(annotations['prometheus.io/scrape']).toBe('true');
    expect(Number(annotations['prometheus.io/port'])).toBe(port);
    expect(annotations['prometheus.io/path']).toBe('/metrics');
    const service = only<IService>('Service');
    const servicePort = service.spec?.ports?.find((p) => p.name === 'metrics');
    expect(containerPort(servicePort?.targetPort ?? servicePort?.port)).toBe(port);
  });

  it('selects its own pods, and so do the Service and the PodDisruptionBudget', () => {
    const podLabels = deployment.spec!.template.metadata?.labels;
    expect(matches(deployment.spec!.selector.matchLabels, podLabels)).toBe(true);
    expect(matches(only<IService>('Service').spec?.selector, podLabels)).toBe(true);
    expect(matches(only<IPodDisruptionBudget>('PodDisruptionBudget').spec?.selector?.matchLabels, podLabels)).toBe(true);
    const spread = podSpec.topologySpreadConstraints ?? [];
    expect(spread.every((c) => matches(c.labelSelector?.matchLabels, podLabels))).toBe(true);
  });

  it('is scaled by an HPA and, optionally, a KEDA ScaledObject that both target it', () => {
    const hpa = only<IHorizontalPodAutoscaler>('HorizontalPodAutoscaler');
    const scaledObject = only<IScaledObject>('ScaledObject');
    const target = { apiVersion: 'apps/v1', kind: 'Deployment', name: deployment.metadata?.name };
    expect(hpa.spec?.scaleTargetRef).toEqual(target);
    expect(scaledObject.spec.scaleTargetRef).toEqual(target);
    expect([hpa.spec?.minReplicas, hpa.spec?.maxReplicas]).toEqual([2, 10]);
    expect([scaledObject.spec.minReplicaCount, scaledObject.spec.maxReplicaCount]).toEqual([2, 10]);
    expect(deployment.spec!.replicas).toBeGreaterThanOrEqual(hpa.spec!.minReplicas!);
    expect(deployment.spec!.replicas).toBeLessThanOrEqual(hpa.spec!.maxReplicas);
    // A CPU utilisation target means nothing without a CPU request.
    expect(hpa.spec?.metrics?.[0].resource?.name).toBe('cpu');
    expect(worker.resources?.requests?.cpu).toBeDefined();
  });

  it('polls, through KEDA\'s temporal scaler, the task queue the workers serve', () => {
    const scaledObject = only<IScaledObject>('ScaledObject');
    const trigger = scaledObject.spec.triggers.find((t) => t.type === 'temporal');
    const metadata = trigger?.metadata ?? {};
    // KEDA's CRD types trigger metadata as a string map; the keys are checked here against the
    // temporal scaler's own parameters (kedacore/keda pkg/scalers/temporal_scaler.go and the
    // scaler's docs for KEDA 2.17–2.22), so a misspelt key cannot be silently ignored.
    const known = new Set([
      'endpoint', 'endpointFromEnv', 'namespace', 'namespaceFromEnv', 'taskQueue', 'taskQueueFromEnv',
      'targetQueueSize', 'activationTargetQueueSize', 'queueTypes', 'buildId', 'buildIdFromEnv',
      'workerDeploymentName', 'workerDeploymentNameFromEnv', 'workerDeploymentBuildId', 'workerDeploymentBuildIdFromEnv',
      'selectAllActive', 'selectUnversioned', 'includeRunningWorkflowCount', 'workflowTaskQueueForCount',
      'minConnectTimeout', 'unsafeSsl', 'tlsServerName', 'enableTLS',
    ]);
    expect(Object.keys(metadata).filter((key) => !known.has(key))).toEqual([]);
    expect(metadata.endpoint).toBe(configMap.data?.TEMPORAL_ADDRESS);
    expect(metadata.namespace).toBe(configMap.data?.TEMPORAL_NAMESPACE);
    expect(metadata.taskQueue).toBe(configMap.data?.FERRY_TASK_QUEUE);
    expect(metadata.targetQueueSize).toMatch(/^[1-9]\d*$/);
    expect(metadata.queueTypes.split(',').every((t) => ['workflow', 'activity', 'nexus'].includes(t))).toBe(true);
  });

  it('runs as the image\'s non-root user with a read-only root and writable temp and cache directories', () => {
    const image = dockerfile();
    expect(image.from).toMatch(/^node:20-/);
    expect(podSpec.securityContext?.runAsNonRoot).toBe(true);
    // The image's USER is a name (`node`); the kubelet can only verify runAsNonRoot with a numeric uid.
    if (!/^\d+$/.test(image.user)) expect(podSpec.securityContext?.runAsUser).toBe(1000);
    expect(worker.securityContext?.allowPrivilegeEscalation).toBe(false);
    expect(worker.securityContext?.readOnlyRootFilesystem).toBe(true);
    const mounts = (worker.volumeMounts ?? []).filter((m) => !m.readOnly).map((m) => m.mountPath);
    const writable = (path: string) => mounts.some((mount) => path === mount || path.startsWith(`${mount}/`));
    expect(writable('/tmp')).toBe(true);
    // The bundles are in the image's cache directory; a Deployment that moved it would need it writable.
    const cacheDir = workerEnv().get('FERRY_CACHE_DIR') ?? image.env.FERRY_CACHE_DIR;
    expect(cacheDir).toBe(image.env.FERRY_CACHE_DIR);
  });

  it('starts its process with the environment Ferry measures workers in (malloc arenas), which nothing overrides', () => {
    const image = dockerfile();
    for (const [name, value] of Object.entries(WORKER_PROCESS_ENV)) {
      expect(image.env[name]).toBe(value);
      expect(workerEnv().get(name) ?? value).toBe(value);
      const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')) as { services: Record<string, ComposeService> };
      expect(compose.services['ferry-worker'].environment?.[name] ?? value).toBe(value);
    }
  });

  it('builds both workflow bundles into the image with the Dockerfile\'s own command', async () => {
    const image = dockerfile();
    const step = image.runs.find((r) => r.includes('--prebuild'));
    // The compiled build, as in the image (the jest set-up has compiled dist/ from these sources).
    expect(step).toBe('node dist/src/temporal/bundle.js --prebuild');
    const cache = mkdtempSync(join(tmpdir(), 'ferry-image-cache-'));
    try {
      const { stdout } = await promisify(execFile)('/bin/sh', ['-c', step!], { cwd: ROOT, env: { ...process.env, FERRY_CACHE_DIR: cache, FERRY_WORKFLOW_BUNDLE: '' } });
      const [plain, encoded] = stdout.trim().split('\n');
      expect(plain).toBe(join(cache, 'bundles', `workflows-${workflowCodeHash()}.js`));
      expect(encoded).toBe(join(cache, 'bundles', `workflows-${workflowCodeHash()}-encoded-failures.js`));
      // Only the variant for FERRY_CODEC_KEY carries Ferry's failure converter.
      expect(readFileSync(encoded, 'utf8')).toMatch(/encodeCommonAttributes: true/);
      expect(readFileSync(plain, 'utf8')).not.toMatch(/encodeCommonAttributes: true/);
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  }, 180_000);
});

interface ComposeService {
  image?: string;
  command?: string[];
  environment?: Record<string, string>;
  healthcheck?: { test: string[]; start_period?: string };
  depends_on?: Record<string, { condition: string }> | string[];
  stop_grace_period?: string;
  deploy?: { replicas?: number };
}

describe('docker-compose.yml', () => {
  const schemaText = readFileSync(join(SCHEMAS, 'compose-spec.json'), 'utf8');
  const schema = JSON.parse(schemaText) as { $schema: string };
  // compose-spec.json declares draft 2020-12, so Ajv2020. strictSchema stays on: a keyword Ajv did
  // not know would otherwise be ignored silently. strictTypes and strictRequired lint schema style
  // (`properties` without `type: object`, `required` naming a property defined in a sibling
  // branch), which the spec uses and which change nothing in what validates.
  const validate = new Ajv2020({ allErrors: true, strictSchema: true, strictTypes: false, strictRequired: false }).compile(schema);
  const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')) as { services: Record<string, ComposeService> };
  const errors = (doc: unknown) => (validate(doc) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message}`));

  it('is checked against the vendored schema the README names, unmodified', () => {
    expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
    const readme = readFileSync(join(SCHEMAS, 'README.md'), 'utf8');
    expect(readme).toContain(createHash('sha256').update(schemaText).digest('hex'));
  });

  it('passes the Compose Specification schema', () => {
    expect(errors(compose)).toEqual([]);
  });

  it('would be rejected if broken, while x- extensions stay allowed', () => {
    const badPorts = clone(compose) as { services: Record<string, Record<string, unknown>> };
    badPorts.services['ferry-worker'].ports = 5;
    expect(errors(badPorts).join('\n')).toMatch(/\/services\/ferry-worker\/ports must be array/);
    expect(errors({ ...compose, workers: {} }).join('\n')).toMatch(/must NOT have additional properties/);
    const badKey = clone(compose) as { services: Record<string, Record<string, unknown>> };
    badKey.services['ferry-worker'].replicas = 3;
    expect(errors(badKey).length).toBeGreaterThan(0);
    expect(errors({ ...compose, 'x-ferry': { anything: true } })).toEqual([]);
  });

  it('waits on health only where a service has a healthcheck', () => {
    for (const service of Object.values(compose.services)) {
      const dependsOn = Array.isArray(service.depends_on) ? {} : (service.depends_on ?? {});
      for (const [name, { condition }] of Object.entries(dependsOn)) {
        if (condition === 'service_healthy') expect([name, compose.services[name]?.healthcheck?.test]).toEqual([name, expect.any(Array)]);
      }
    }
  });

  it('runs several workers that get longer to stop than their shutdown grace', () => {
    const worker = compose.services['ferry-worker'];
    expect(worker.deploy?.replicas).toBeGreaterThanOrEqual(2);
    const command = worker.command ?? [];
    expect(command[0]).toBe('worker');
    // The grace and the port come from the environment; a flag would override it.
    expect(command.filter((arg) => arg === '--shutdown-grace' || arg === '--metrics-port')).toEqual([]);
    const settings = workerSettings({}, worker.environment ?? {});
    // Docker's default stop_grace_period is 10s.
    expect(parseDuration(worker.stop_grace_period ?? '10s')).toBeGreaterThan(settings.shutdownGrace);
    expect(settings.metricsPort).toBe(Number(configMap.data?.FERRY_METRICS_PORT));
  });

  describe('the worker healthcheck, run as Docker would against a stand-in worker on loopback', () => {
    let server: Server;
    let port: number;
    let ready = true;
    const paths: string[] = [];

    beforeAll(async () => {
      server = createServer((req, res) => {
        paths.push(req.url ?? '');
        res.statusCode = req.url === '/readyz' && ready ? 200 : 503;
        res.end();
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      port = (server.address() as AddressInfo).port;
    });

    afterAll(async () => {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    });

    /** Runs the healthcheck's CMD with this Node (the image's is Node 20 too) and returns its exit code. */
    function healthcheck(env: Record<string, string>): Promise<number> {
      const test = compose.services['ferry-worker'].healthcheck?.test ?? [];
      expect(test.slice(0, 2)).toEqual(['CMD', 'node']);
      return new Promise((resolve) => {
        execFile(process.execPath, test.slice(2), { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 20_000 }, (err) => {
          resolve(err ? ((err as { code?: number }).code ?? -1) : 0);
        });
      });
    }

    it('passes when /readyz answers 200 on FERRY_METRICS_PORT, and fails on 503 or when nothing listens', async () => {
      ready = true;
      expect(await healthcheck({ FERRY_METRICS_PORT: String(port) })).toBe(0);
      expect(paths.pop()).toBe('/readyz');
      ready = false;
      expect(await healthcheck({ FERRY_METRICS_PORT: String(port) })).toBe(1);
      const closed = createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const closedPort = (closed.address() as AddressInfo).port;
      await new Promise<void>((resolve) => closed.close(() => resolve()));
      expect(await healthcheck({ FERRY_METRICS_PORT: String(closedPort) })).toBe(1);
    });
  });
});
