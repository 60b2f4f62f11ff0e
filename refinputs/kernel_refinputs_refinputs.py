class Model(torch.nn.Module):
    def forward(self, x):
        return x.sum(dim=-1)
