// The SDK's pure part under Node: settings, documents, verdicts and the hooks' error mapping.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  SettingsReader, InvalidSettings, decode, parsed, pod, verdict, fromPodPhase, hooks, isLabelValue,
  isLabelKey,
} from '../tfjob-policy/core.js';

test('settings are read field by field and unknown keys are refused', () => {
  const reader = SettingsReader.parse('{"team": "ml", "teem": 1}');
  assert.equal(reader.string('team'), 'ml');
  assert.throws(() => reader.done(), { message: /^teem: unknown field \(known fields: team\)/ });
});

test('settings errors name the field, nested ones with their path', () => {
  const reader = SettingsReader.parse('{"a": {"b": [1]}, "n": "x"}');
  assert.throws(() => reader.object('a').strings('b'), { message: 'a.b[0]: expected a string, got a number' });
  assert.throws(() => reader.integer('n'), { message: 'n: expected an integer, got a string' });
  assert.throws(() => reader.string('missing'), { message: 'missing: required' });
  for (const text of ['', 'null', '{}']) assert.doesNotThrow(() => SettingsReader.parse(text).done());
  assert.throws(() => SettingsReader.parse('[1]'), InvalidSettings);
  assert.throws(() => SettingsReader.parse('{'), { message: /^settings: not JSON/ });
});

test('the same text is parsed once', () => {
  let calls = 0;
  const parse = (r) => { calls += 1; return r.string('x', ''); };
  parsed('{"x":"1"}', parse);
  parsed('{"x":"1"}', parse);
  assert.equal(calls, 1);
  assert.equal(parsed('{"x":"2"}', parse), '2');
  assert.equal(calls, 2);
});

test('label values', () => {
  for (const ok of ['', 'ml', 'a.b_c-d', 'x'.repeat(63)]) assert.ok(isLabelValue(ok), ok);
  for (const bad of ['-a', 'a-', 'not a label', 'x'.repeat(64), 'é']) assert.ok(!isLabelValue(bad), bad);
});

test('label keys', () => {
  const good = ['team', 'a.b_c-d', 'x'.repeat(63), 'example.com/tier', 'a/b', `${'x'.repeat(253)}/n`];
  for (const ok of good) assert.ok(isLabelKey(ok), ok);
  const bad = ['', '/team', 'example.com/', 'Example.com/tier', 'a/b/c', 'x'.repeat(64),
    `${'x'.repeat(254)}/n`, 'not a key', 'é', 'team\n', '-a.com/b', 5];
  for (const key of bad) assert.ok(!isLabelKey(key), String(key));
});

test('pods are edited in place and their reasons read', () => {
  const p = decode('{"metadata": {"name": "w"}, "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}', 'pod');
  pod.labels(p).team = 'ml';
  assert.deepEqual(p.metadata, { name: 'w', labels: { team: 'ml' } });
  assert.equal(pod.phase(p), 'Failed');
  assert.equal(pod.terminatedReason(p), 'OOMKilled');
  assert.throws(() => decode('[]', 'pod'), { message: 'pod: expected an object' });
  assert.throws(() => pod.labels({ metadata: { labels: [] } }), { message: 'pod.metadata.labels: expected an object' });
});

test('verdicts are checked', () => {
  assert.throws(() => verdict({ phase: 'done' }), TypeError);
  assert.throws(() => verdict({ phase: 'running', kind: 'nobody' }), TypeError);
  assert.deepEqual(fromPodPhase('Failed', 'Error'), verdict({ phase: 'retryable-failure', reason: 'Error', kind: 'user' }));
});

test('hooks turn every exception into the contract error', () => {
  const exported = hooks({
    settings(r) { const v = r.string('mode', 'ok'); r.done(); return v; },
    decorate(ctx, mode, p) {
      if (mode === 'bug') throw new RangeError('out of range');
      p.metadata = { labels: { job: ctx.jobName, team: ctx.jobLabels.team } };
      return p;
    },
  });
  const ctx = { jobName: 'mnist', jobLabels: [['team', 'ml']], jobAnnotations: [] };
  assert.equal(exported.decorate.decoratePod(ctx, '{}', '{}'), '{"metadata":{"labels":{"job":"mnist","team":"ml"}}}');
  assert.throws(() => exported.decorate.decoratePod(ctx, '{"mode":"bug"}', '{}'), (e) => e.tag === 'failed' && e.val === 'RangeError: out of range');
  assert.throws(() => exported.decorate.decoratePod(ctx, '{"x":1}', '{}'), (e) => e.tag === 'invalid-settings' && /^x: unknown field/.test(e.val));
  assert.throws(() => exported.decorate.decoratePod(ctx, '{}', 'nope'), (e) => e.tag === 'invalid-input' && /^pod: not JSON/.test(e.val));
  assert.throws(() => exported.settings.validateSettings('{"mode": 1}'), (e) => e === 'mode: expected a string, got a number');
});
