"""The SDK's pure part under CPython: settings, documents, verdicts and the hooks' errors.

Run: `python3 -m unittest discover -s tests` in this directory.
"""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tfjob_policy as tp  # noqa: E402


class SettingsTest(unittest.TestCase):
    def test_fields_are_read_one_by_one_and_unknown_keys_refused(self):
        reader = tp.SettingsReader.parse('{"team": "ml", "teem": 1}')
        self.assertEqual(reader.string("team"), "ml")
        with self.assertRaisesRegex(tp.InvalidSettings, r"^teem: unknown field \(known fields: team\)"):
            reader.done()

    def test_errors_name_the_field(self):
        reader = tp.SettingsReader.parse('{"a": {"b": [1]}, "n": "x", "flag": 1}')
        with self.assertRaisesRegex(tp.InvalidSettings, r"^a\.b\[0\]: expected a string, got a number$"):
            reader.object("a").strings("b")
        with self.assertRaisesRegex(tp.InvalidSettings, "^n: expected an integer, got a string$"):
            reader.integer("n")
        with self.assertRaisesRegex(tp.InvalidSettings, "^flag: expected a boolean"):
            reader.boolean("flag")
        with self.assertRaisesRegex(tp.InvalidSettings, "^missing: required$"):
            reader.string("missing")
        for text in ("", "null", "{}", "  "):
            tp.SettingsReader.parse(text).done()
        with self.assertRaisesRegex(tp.InvalidSettings, "expected an object, got a list"):
            tp.SettingsReader.parse("[1]")
        with self.assertRaisesRegex(tp.InvalidSettings, "^settings: not JSON"):
            tp.SettingsReader.parse("{")

    def test_the_same_text_is_parsed_once(self):
        calls = []

        def parse(reader):
            calls.append(1)
            return reader.string("x", "")

        tp.parsed('{"x": "1"}', parse)
        tp.parsed('{"x": "1"}', parse)
        self.assertEqual(len(calls), 1)
        self.assertEqual(tp.parsed('{"x": "2"}', parse), "2")
        self.assertEqual(len(calls), 2)

    def test_label_values(self):
        for ok in ("", "ml", "a.b_c-d", "x" * 63):
            self.assertTrue(tp.is_label_value(ok), ok)
        for bad in ("-a", "a-", "not a label", "x" * 64, "é", "a\n"):
            self.assertFalse(tp.is_label_value(bad), bad)

    def test_label_keys(self):
        for ok in ("team", "a.b_c-d", "x" * 63, "example.com/tier", "a/b", "x" * 253 + "/n"):
            self.assertTrue(tp.is_label_key(ok), ok)
        bad_keys = ("", "/team", "example.com/", "Example.com/tier", "a/b/c", "x" * 64,
                    "x" * 254 + "/n", "not a key", "é", "team\n", "-a.com/b")
        for bad in bad_keys:
            self.assertFalse(tp.is_label_key(bad), bad)


class PodTest(unittest.TestCase):
    def test_pods_are_edited_in_place_and_their_reasons_read(self):
        pod = tp.pod.decode(
            '{"metadata": {"name": "w"}, "status": {"phase": "Failed", "containerStatuses":'
            ' [{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}',
            "pod",
        )
        tp.pod.labels(pod)["team"] = "ml"
        self.assertEqual(pod["metadata"], {"name": "w", "labels": {"team": "ml"}})
        self.assertEqual(tp.pod.phase(pod), "Failed")
        self.assertEqual(tp.pod.terminated_reason(pod), "OOMKilled")
        with self.assertRaisesRegex(tp.InvalidInput, "^pod: expected an object$"):
            tp.pod.decode("[]", "pod")
        with self.assertRaisesRegex(tp.InvalidInput, "^pod.metadata.labels: expected an object$"):
            tp.pod.labels({"metadata": {"labels": []}})


class VerdictTest(unittest.TestCase):
    def test_verdicts_are_checked(self):
        with self.assertRaises(ValueError):
            tp.Verdict(phase="done")
        with self.assertRaises(ValueError):
            tp.Verdict(phase="running", kind="nobody")
        self.assertEqual(
            tp.from_pod_phase("Failed", "Error"),
            tp.Verdict(phase="retryable-failure", reason="Error", kind="user"),
        )

    def test_now_is_read_as_rfc3339(self):
        self.assertEqual(tp.parse_time("2026-01-01T01:00:00Z", "now").hour, 1)
        with self.assertRaisesRegex(tp.InvalidInput, "^now: "):
            tp.parse_time("yesterday", "now")


if __name__ == "__main__":
    unittest.main()


class ClusterTest(unittest.TestCase):
    def test_outside_the_sandbox_every_read_is_unavailable(self):
        for read in (lambda: tp.cluster.namespace("ml"), lambda: tp.cluster.nodes("pool=gpu")):
            with self.assertRaises(tp.cluster.ReadError) as caught:
                read()
            self.assertEqual(caught.exception.kind, "unavailable")
            self.assertIsInstance(caught.exception, tp.Failed)
