"""spark-submit entry point of patient_monitoring (pulse windows, heart rate, alerts).

    spark-submit spark_apps/patient_monitoring/app.py \
        --spec spark_apps/patient_monitoring/patient_monitoring.toml
"""

import sys
from pathlib import Path

from statekeeper.app.launcher import main

if __name__ == "__main__":
    sys.exit(main(default_spec=Path(__file__).with_name("patient_monitoring.toml")))
