"""`manage.py drill SCENARIO`: a scripted incident under a steady load, and its report.

- `scenarios.py`: what each scenario does to the fake providers (or Redis) and when, and what
  it expects;
- `load.py`: the open-loop load, the breaker readings and the timeline's actions, collected as
  plain samples;
- `report.py`: the report's arithmetic, a pure function over those samples, and its text;
- `embedded.py`: the gateway the drill starts itself (temp DATA_DIR, fake providers, uvicorn
  processes, a private Redis when needed); `setup.py` and `collect.py` run inside it (and in-process
  against a running gateway): the drill's configuration, then the ledger rows and alerts;
- `runner.py`: one run, from the target to the report.
"""
