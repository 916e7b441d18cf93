import numpy as np, pandas as pd, matplotlib
import matplotlib.pyplot as plt
from sklearn.linear_model import LinearRegression
rng = np.random.default_rng(0)
x = rng.uniform(0, 10, 200)
df = pd.DataFrame({"x": x, "y": 3 * x + 2 + rng.normal(0, 1, 200)})
model = LinearRegression().fit(df[["x"]], df["y"])
print(f"slope={model.coef_[0]:.2f} intercept={model.intercept_:.2f}")
ax = df.plot.scatter("x", "y", s=5)
ax.plot(df["x"], model.predict(df[["x"]]), color="red")
plt.savefig("fit.png")
print(df.describe().loc[["mean", "std"]])
