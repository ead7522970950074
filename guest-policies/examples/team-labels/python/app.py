"""team-labels in Python: labels every pod with the team named in the settings.

Settings: `{"team": "ml"}`; `{}` labels nothing. A team that is not a label value is refused.
Build: `python3 build.py` (componentize-py, world `decorator`).
"""

import tfjob_policy as tp


class TeamLabels(tp.Policy):
    def settings(self, reader: tp.SettingsReader):
        team = reader.string("team", None)
        reader.done()
        if team is not None and (team == "" or not tp.is_label_value(team)):
            raise tp.InvalidSettings(f"team: {team!r} is not a label value")
        return team

    def decorate(self, ctx: tp.Context, team, pod):
        if team:
            tp.log.info("labelling pod", job=ctx.job_name, team=team)
            tp.pod.labels(pod)["team"] = team
        return pod


hooks = tp.exports(TeamLabels())
Settings, Decorate = hooks.Settings, hooks.Decorate
